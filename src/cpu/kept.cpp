#include "flashbench/cpu/kept.hpp"

namespace flashbench::cpu {

namespace {
template <class View, class Scores>
View view_of(Variant variant, const Problem& problem, const KeptTensors& kept) {
  View view;
  for (const KeptTensor& tensor : kept_per_layer(variant, problem)) {
    if (tensor.name == "P" || tensor.name == "S") view.scores = kept.get<Scores>(tensor.name);
    else if (tensor.name == "m") view.row_max = kept.get<float>(tensor.name);
    else if (tensor.name == "l") view.row_sum = kept.get<float>(tensor.name);
    else if (tensor.name == "LSE") view.lse = kept.get<float>(tensor.name);
    else if (tensor.name == "Pd") view.dropped = kept.get<Scores>(tensor.name);
    else if (tensor.name == "mask") view.mask = kept.get<uint8_t>(tensor.name);
  }
  return view;
}
}  // namespace

KeptView kept_view(Variant variant, const Problem& problem, const KeptTensors& kept) {
  return view_of<KeptView, float>(variant, problem, kept);
}

KeptView16 kept_view16(Variant variant, const Problem& problem, const KeptTensors& kept) {
  return view_of<KeptView16, Half>(variant, problem, kept);
}

}  // namespace flashbench::cpu
