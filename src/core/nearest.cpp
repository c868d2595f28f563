#include "flashbench/core/nearest.hpp"

#include <algorithm>

namespace flashbench {

int edit_distance(std::string_view a, std::string_view b) {
  // d[i][j]: edits turning a's first i characters into b's first j; three rows suffice for the swap.
  const size_t n = a.size(), m = b.size();
  std::vector<int> before(m + 1), previous(m + 1), current(m + 1);
  for (size_t j = 0; j <= m; ++j) previous[j] = int(j);
  for (size_t i = 1; i <= n; ++i) {
    current[0] = int(i);
    for (size_t j = 1; j <= m; ++j) {
      const int replace = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, replace});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        current[j] = std::min(current[j], before[j - 2] + 1);
    }
    before.swap(previous);
    previous.swap(current);
  }
  return previous[m];
}

std::optional<std::string> nearest_name(std::string_view typed, const std::vector<std::string>& known) {
  const size_t letters = typed.size() - std::min(typed.find_first_not_of('-'), typed.size());
  const int allowed = std::max(1, int(letters / 4));
  std::optional<std::string> best;
  int best_distance = allowed + 1;
  for (const std::string& name : known) {
    const int distance = edit_distance(typed, name);
    if (distance < best_distance) {
      best = name;
      best_distance = distance;
    }
  }
  return best;
}

}  // namespace flashbench
