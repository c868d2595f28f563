#include "flashbench/backend.hpp"

#include <algorithm>

namespace flashbench {

std::vector<Variant> standard_first(std::span<const Variant> variants) {
  std::vector<Variant> order(variants.begin(), variants.end());
  std::stable_partition(order.begin(), order.end(), [](Variant v) { return v == Variant::standard; });
  return order;
}

std::vector<Row> in_order_of(std::vector<Row> rows, std::span<const Variant> variants) {
  std::vector<Row> ordered;
  ordered.reserve(rows.size());
  for (Variant variant : variants)
    for (Row& row : rows)
      if (row.variant == variant) ordered.push_back(std::move(row));
  return ordered;
}

}  // namespace flashbench
