"""Results files with their timings steadied, for the command-line tests that judge compare's logic
(its load bound, a doubled row) rather than this machine's noise: on a loaded machine a short run's
rounds spread by more than the change a test injects (input_bounds_test, compare_rounds_test)."""
import copy


def steady(timing):
    """One phase's timing (a row's timing.fwd or timing.bwd), in place: its samples and round medians
    a spread of +-0.4 % about its median, the statistics made from them."""
    if not isinstance(timing, dict) or not isinstance(timing.get("median_ms"), (int, float)):
        return
    median = timing["median_ms"]
    for key, period in (("samples_ms", 5), ("round_medians_ms", 3)):
        count = len(timing.get(key, []))
        timing[key] = [median * (1 + 0.002 * ((i % period) - period // 2)) for i in range(count)]
    samples = timing["samples_ms"] or [median]
    timing["mean_ms"] = median
    timing["min_ms"], timing["max_ms"] = min(samples), max(samples)
    timing["stddev_ms"] = (sum((x - median) ** 2 for x in samples) / len(samples)) ** 0.5
    timing["ci95_low_ms"], timing["ci95_high_ms"] = median * 0.997, median * 1.003
    timing.pop("cv", None)


def steadied(document):
    """A copy of a results document with every row's phases steadied."""
    result = copy.deepcopy(document)
    for row in result["rows"]:
        for phase in ("fwd", "bwd"):
            steady(row["timing"].get(phase))
    return result
