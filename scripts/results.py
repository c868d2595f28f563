"""The one reader of flashbench results files, shared by plot.py and cpu_table.py.

A results file is flashbench's JSON contract in one of two forms:
  .json   one document {"schema_version", "meta", "rows"[, "summary"]}
  .jsonl  a stream: a first line {"schema_version", "meta"}, then one row per line, perhaps a last
          {"summary"} line; an empty stream (a run that wrote nothing) reads as no rows
Peers' files (scripts/peers) follow the same contract with their own backend names.

read_results(path) gives Results(schema_version, meta, rows); a file that cannot be read, is not
JSON or is not a results file raises ResultsError, whose message is one line naming the file.
The helpers below read a row the same way everywhere: its name (impl, else variant), whether it
is a peer's, and its rates from the row's own "throughput" block (flashbench and the peers count
the FLOPs; nothing here restates that count).
"""
import collections
import json

# Backends flashbench itself reports; any other backend is a peer's (e.g. "torch-sdpa-flash").
FLASHBENCH_BACKENDS = ("cpu", "cuda")
# The variants in flashbench's own order.
VARIANTS = ("standard", "v1", "v2", "checkpoint")

# summary: the document's "summary" object ({} where it has none: a run of one configuration, a peer).
Results = collections.namedtuple("Results", "schema_version meta rows summary", defaults=({},))


class ResultsError(Exception):
    """A results file that cannot be used; str() is one line."""


def _one_line(text):
    return " ".join(str(text).split())


def read_json(path):
    """Any JSON document (e.g. `flashbench info --peak --format json`), with ResultsError on failure."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as error:
        raise ResultsError(f"cannot read '{path}': {_one_line(error.strerror)}")
    except UnicodeDecodeError as error:
        raise ResultsError(f"'{path}' is not UTF-8 text: {_one_line(error)}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ResultsError(f"'{path}' is not JSON: {_one_line(error)}")


def _check_rows(path, rows, where=""):
    if not isinstance(rows, list):
        raise ResultsError(f"'{path}': \"rows\" is not a list")
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ResultsError(f"'{path}'{where}: row {index + 1} is not an object")
    return rows


def _read_stream(path):
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError as error:
        raise ResultsError(f"cannot read '{path}': {_one_line(error.strerror)}")
    except UnicodeDecodeError as error:
        raise ResultsError(f"'{path}' is not UTF-8 text: {_one_line(error)}")
    version, meta, rows, summary = None, {}, [], {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ResultsError(f"'{path}' line {number} is not JSON: {_one_line(error)}")
        if not isinstance(record, dict):
            raise ResultsError(f"'{path}' line {number} is not a JSON object")
        if "meta" in record or ("schema_version" in record and "backend" not in record):
            version, meta = record.get("schema_version"), record.get("meta") or {}
        elif "summary" not in record:
            rows.append(record)
        elif isinstance(record["summary"], dict):
            summary = record["summary"]
    return Results(version, meta, rows, summary)


def read_results(path):
    """Results(schema_version, meta, rows) of a .json document or a .jsonl stream."""
    if str(path).endswith(".jsonl"):
        return _read_stream(path)
    document = read_json(path)
    if not isinstance(document, dict) or "rows" not in document:
        raise ResultsError(f"'{path}' has no \"rows\": not a flashbench results file")
    meta = document.get("meta") or {}
    if not isinstance(meta, dict):
        raise ResultsError(f"'{path}': \"meta\" is not an object")
    summary = document.get("summary")
    return Results(document.get("schema_version"), meta, _check_rows(path, document["rows"]),
                   summary if isinstance(summary, dict) else {})


def is_peer(row):
    """A row written by a peer (scripts/peers), not by flashbench."""
    return row.get("backend") not in FLASHBENCH_BACKENDS


def impl_of(row):
    """The implementation's name ("v2", "v2.split", "cudnn"); files from before "impl" give the variant."""
    return row.get("impl") or row.get("variant") or "?"


def name_of(row):
    """What a figure or table calls the row: a peer by its backend ("torch-sdpa-flash"), flashbench's
    rows by their implementation ("v2", "v2.split")."""
    return row.get("backend", "?") if is_peer(row) else impl_of(row)


def variant_rank(row):
    """Where the row's variant stands in flashbench's order (unknown variants last)."""
    variant = row.get("variant")
    return VARIANTS.index(variant) if variant in VARIANTS else len(VARIANTS)


def median_ms(row, phase):
    """The median time of phase ("fwd" or "bwd") in ms, or None."""
    value = ((row.get("timing") or {}).get(phase) or {}).get("median_ms")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def _positive(value):
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def samples_ms(row, phase):
    """Every timed sample of phase ("fwd" or "bwd") in ms that is a positive number; [] when none."""
    samples = ((row.get("timing") or {}).get(phase) or {}).get("samples_ms")
    return [float(s) for s in samples or [] if _positive(s) is not None]


def flop(row, phase):
    """The FLOP count of phase ("fwd" or "bwd") that the row's own rate was made from, or None.

    flashbench's rows carry it (`flop.fwd`, `flop.bwd`); the peers' rows carry only the rate, which
    is that count over the median time, so the count is rate x median. No formula is restated here.
    """
    counted = _positive((row.get("flop") or {}).get(phase))
    if counted is not None:
        return counted
    rate, time = _positive((row.get("throughput") or {}).get(f"{phase}_tflops")), median_ms(row, phase)
    return rate * 1e12 * time * 1e-3 if rate is not None and time is not None else None


def gflops(row, phase):
    """The row's own rate for phase ("fwd" or "bwd") in GFLOP/s (1000 x its TFLOP/s), or None."""
    value = (row.get("throughput") or {}).get(f"{phase}_tflops")
    return 1000.0 * value if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None
