"""Run as ``python -m pytest tests/sdk/lying_sink_suite.py``: the sink suite over a sink
that reports success without writing. Every test touching written rows must fail naming
B2. Not collected by the normal run (the file name does not start with ``test_``)."""

from tests.sdk.broken_sinks import LyingSuite


class TestLyingSinkConformance(LyingSuite):
    pass
