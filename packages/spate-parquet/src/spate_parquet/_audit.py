"""Write-audit-publish: checks each part passes before it becomes visible.

The checks run on the part's Arrow table on the writer thread, before anything is
written: a part that fails never reaches the store (files mode) nor the manifest
(manifest mode). :class:`AuditFailure` names the failed check; the sink applies
``audits.on_failure`` to the part's batch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import pyarrow as pa

from spate_parquet.config import AuditConfig

Check = Callable[[pa.Table], object]


class AuditFailure(Exception):
    """A part failed the check :attr:`check`."""

    def __init__(self, check: str, reason: str) -> None:
        super().__init__(f"audit {check} failed: {reason}")
        self.check = check
        self.reason = reason


def load_check(spec: str) -> Check:
    """The user function ``module:function``."""
    module, _, name = spec.partition(":")
    found: Check = getattr(importlib.import_module(module), name)
    return found


class Auditor:
    """The configured checks, in order: not_empty, not_null, unique, then the user's."""

    def __init__(self, config: AuditConfig) -> None:
        self._config = config
        self._check = load_check(config.check) if config.check else None

    def audit(self, table: pa.Table) -> None:
        """Raise :class:`AuditFailure` naming the first check ``table`` fails."""
        cfg = self._config
        if cfg.not_empty and table.num_rows == 0:
            raise AuditFailure("not_empty", "the part holds no rows")
        for column in cfg.not_null:
            if column not in table.column_names:
                raise AuditFailure(f"not_null({column})", "the part has no such column")
            nulls = table.column(column).null_count
            if nulls:
                raise AuditFailure(f"not_null({column})", f"{nulls} null values")
        if cfg.unique:
            missing = [c for c in cfg.unique if c not in table.column_names]
            if missing:
                raise AuditFailure(f"unique({','.join(cfg.unique)})", f"no column {missing[0]}")
            distinct = table.group_by(cfg.unique).aggregate([]).num_rows
            if distinct != table.num_rows:
                raise AuditFailure(
                    f"unique({','.join(cfg.unique)})",
                    f"{table.num_rows - distinct} duplicate keys",
                )
        if self._check is not None:
            verdict = self._check(table)
            if verdict is False or isinstance(verdict, str):
                reason = verdict if isinstance(verdict, str) else "returned False"
                raise AuditFailure(self._config.check, reason)
