"""JSON, Variant and Dynamic values through a whole pipeline into ClickHouse, on the row
path and on the columnar path (B310-B316; the cases of ``test_clickhouse_semistructured``).

Each case is a batch of five JSON records ``{"id": i, "c0": value}`` into a table
``(id Int64, c0 <type>)`` whose sink skips record errors (:func:`run_case` of
:mod:`tests.clickhouse.columnar_values`); the record at offset 2 holds a value the column
cannot take. What is read back shows each value with the type it was stored as
(``variantType``, ``dynamicType``) or the JSON object as the server holds it. Run as
``python -m tests.clickhouse.semistructured_values DIR`` against an embedded chDB engine
(one per process).
"""

from __future__ import annotations

import json
import sys

from tests.clickhouse.columnar_values import Case, run_case

_VARIANT = "concat(ifNull(toString(c0), 'NULL'), ':', variantType(c0))"
_DYNAMIC = "concat(ifNull(toString(c0), 'NULL'), ':', dynamicType(c0))"
_JSON = "toJSONString(c0)"
_ARRAY = "concat(toString(c0), ':', toString(arrayMap(x -> variantType(x), c0)))"

CASES = (
    Case(
        "variant_string_and_numbers",
        "Variant(String, Int64, Float64)",
        ("a", 7, {"x": 1}, 1.5, "12"),
        ("a:String", "7:Int64", "1.5:Float64", "12:String"),
        _VARIANT,
    ),
    Case(
        "variant_nulls_and_arrays",
        "Variant(String, Array(Int64), Bool)",
        (None, [1, 2], 3.5, True, "x"),
        (":None", "[1,2]:Array(Int64)", "true:Bool", "x:String"),
        _VARIANT,
    ),
    Case(
        "variant_text_into_other_members",
        "Variant(Int64, Date32)",
        (5, "2024-01-02", "abc", "17", 3.0),
        ("5:Int64", "2024-01-02:Date32", "17:Int64", "3:Int64"),
        _VARIANT,
    ),
    Case(
        "array_of_variants",
        "Array(Variant(String, Int64))",
        ([1, 2], [None, 3], [1.5], [], [4]),
        ("[1,2]:['Int64','Int64']", "[NULL,3]:['None','Int64']", "[]:[]", "[4]:['Int64']"),
        _ARRAY,
    ),
    Case(
        "dynamic_scalars",
        "Dynamic",
        ("s", 7, {"a": 1}, 2.5, True),
        ("s:String", "7:Int64", "2.5:Float64", "true:Bool"),
        _DYNAMIC,
    ),
    Case(
        "dynamic_arrays_and_nulls",
        "Dynamic",
        ([1, None, 3], None, [[1]], [1, 2], []),
        (
            "[1,NULL,3]:Array(Nullable(Int64))",
            ":None",
            "[1,2]:Array(Nullable(Int64))",
            "[]:Array(Nullable(String))",
        ),
        _DYNAMIC,
    ),
    Case(
        "json_nested_objects",
        "JSON",
        (
            {"a": {"b": 1, "c": [1, 2]}},
            {"k": None, "m": "v"},
            "not an object",
            {"m": {"n": {"o": [1.5, 2]}}},
            {},
        ),
        (
            '{"a":{"b":1,"c":[1,2]}}',
            '{"m":"v"}',
            '{"m":{"n":{"o":[1.5,2]}}}',
            "{}",
        ),
        _JSON,
    ),
    Case(
        "json_typed_paths_and_skip",
        "JSON(a.b Int32, SKIP s)",
        ({"a": {"b": "12"}}, {"a": {"b": 3}, "s": "gone"}, {"a": {"b": "abc"}}, {"z": 1}, {}),
        ('{"a":{"b":12}}', '{"a":{"b":3}}', '{"a":{"b":0},"z":1}', '{"a":{"b":0}}'),
        _JSON,
    ),
)


ROW_CASES = (
    Case(
        "array_of_variants_mixed",
        "Array(Variant(String, Int64))",
        ([1, "a"], ["b", None], [2.5], [], [3]),
        ("[1,'a']:['Int64','String']", "['b',NULL]:['String','None']", "[]:[]", "[3]:['Int64']"),
        _ARRAY,
    ),
    Case(
        "dynamic_mixed_array",
        "Dynamic",
        ([1, "x", None], [True, 2.5], [1, {"a": 1}], ["a", None], [None]),
        (
            "[1,'x',NULL]:Array(Variant(Bool, Float64, Int64, String))",
            "[true,2.5]:Array(Variant(Bool, Float64, Int64, String))",
            "['a',NULL]:Array(Nullable(String))",
            "[NULL]:Array(Nullable(String))",
        ),
        _DYNAMIC,
    ),
    Case(
        "json_mixed_array",
        "JSON",
        ({"c": [1, "x", None]}, {"c": [{"d": 1}, 2]}, [1, "x"], {"c": []}, {"c": None}),
        ('{"c":[1,"x",null]}', '{"c":[{"d":1},2]}', '{"c":[]}', "{}"),
        _JSON,
    ),
)
"""Arrays mixing JSON types: the row path only (the columnar JSON decoder refuses a
record holding one, as a record error of its own: Arrow lists hold one type)."""


def main(argv: list[str]) -> int:
    import clickhouse_connect

    directory = argv[0]
    client = clickhouse_connect.get_client(interface="chdb", path=directory)
    url = f"chdb://{directory}"
    results = {
        case.name: {
            "rows": run_case(url, client, case, False),
            "columns": run_case(url, client, case, True),
        }
        for case in CASES
    }
    for case in ROW_CASES:
        results[case.name] = {"rows": run_case(url, client, case, False)}
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
