// flashbench model: the analytic memory model's table for one configuration, or a seed document's
// figures (--preset), without running a kernel.
#include <omp.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "flashbench/core/errors.hpp"
#include "flashbench/core/sweep.hpp"
#include "flashbench/core/units.hpp"
#include "flashbench/core/variant.hpp"
#include "flashbench/harness/registry.hpp"
#include "flashbench/model/model.hpp"
#include "flashbench/report/json.hpp"

namespace flashbench::cli {

namespace {

using nlohmann::ordered_json;

struct ModelOptions {
  Problem problem;
  std::string variants = "all";
  std::string dtype = "fp32";
  int threads = 0;
  std::string backend = "cpu";
  std::string preset;
  std::string format = "table";
  int64_t context_parallel = 1;  // P devices of a ring (--cp)
  std::optional<int64_t> tokens;  // --tokens T: B = T / N instead of --batch
};



ordered_json tags_json(const TagBytes& tags) {
  ordered_json j = ordered_json::object();
  for (Tag tag : kAllTags) j[std::string(to_string(tag))] = tags[tag];
  return j;
}

// A left-aligned label column and right-aligned value columns.
void print_table(std::ostream& out, const std::vector<std::vector<std::string>>& lines) {
  std::vector<size_t> widths;
  for (const auto& line : lines)
    for (size_t column = 0; column < line.size(); ++column) {
      if (widths.size() <= column) widths.push_back(0);
      widths[column] = std::max(widths[column], line[column].size());
    }
  for (const auto& line : lines) {
    std::string text;
    for (size_t column = 0; column < line.size(); ++column) {
      if (column == 0)
        text += fmt::format("{:<{}}", line[column], widths[column]);
      else
        text += fmt::format("  {:>{}}", line[column], widths[column]);
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out << text << '\n';
  }
}

struct VariantModel {
  Variant variant;
  LayerMemory layer;
  ModelledMemory stack;  // one device's, with --cp
  RingBytes ring;        // zero without --cp
  Row described;  // what a row of this implementation records of it and its device (tiles, threads)
};

// The most causal query-key pairs one device of `ranks` gets under `split`, per head.
int64_t busiest_causal_pairs(const Problem& problem, int64_t ranks, SeqSplit split) {
  int64_t most = 0;
  for (int64_t rank = 0; rank < ranks; ++rank) most = std::max(most, causal_pairs(problem.seq, ranks, rank, split));
  return most;
}

// The problem as the options give it: --dtype, and B from --tokens where it is given.
Problem model_problem(const ModelOptions& options) {
  Problem problem = options.problem;
  problem.dtype = parse_dtype(options.dtype);
  if (options.tokens) {
    if (*options.tokens < 1 || problem.seq < 1 || *options.tokens % problem.seq != 0)
      throw UsageError(fmt::format("--tokens {} is not a multiple of N = {}: B = tokens / N must be a whole number",
                                   *options.tokens, problem.seq));
    problem.batch = *options.tokens / problem.seq;
  }
  validate(problem);
  return problem;
}

// What `model` shows: the problem, whole and as one device of a --cp ring holds it, and each
// variant's model on the backend.
struct ModelView {
  const DeviceEntry& device;
  Problem problem;
  int64_t ranks = 1;  // --cp
  Problem local;      // one device's of `ranks` (seq = N/P)
  ModelParams params;
  std::vector<VariantModel> models;
};

ModelView model_variants(const ModelOptions& options) {
  const Problem problem = model_problem(options);
  const int64_t ranks = options.context_parallel;
  // One device of P holds the local problem (seq = N/P); its implementation sizes its workspace for it.
  const Problem local = local_problem(problem, ranks);
  const DeviceEntry& device = registry().device(options.backend);
  ModelView view{device, problem, ranks, local, device.offline_params(local, DeviceOptions{.threads = options.threads}),
                 {}};
  const ModelParams& params = view.params;
  for (const auto& implementation :
       select_implementations(device, variant_names(parse_variant_list(options.variants, "--variant")))) {
    const Variant variant = implementation->variant();
    const LayerCosts costs = implementation->costs(local, params);
    VariantModel m{variant, layer_memory(problem, variant, costs, params), model_memory(problem, variant, costs, params),
                   {}, {}};
    if (ranks > 1) {
      const ContextParallelModel split = model_context_parallel(problem, ranks, variant, costs, params);
      m.layer = split.layer;
      m.stack = split.per_device;
      m.ring = split.ring;
    }
    implementation->annotate(m.described);
    view.models.push_back(m);
  }
  return view;
}

// One variant's row of `model --format json`.
ordered_json model_row_json(const ModelView& view, const VariantModel& m) {
  const Problem& problem = view.problem;
  ordered_json row;
  row["backend"] = view.device.name;
  row["variant"] = std::string(to_string(m.variant));
  row["problem"] = problem_to_json(problem);
  if (view.params.threads > 0) row["threads"] = view.params.threads;
  if (m.described.row_block > 0) {
    row["tiling"] = {{"row_block", m.described.row_block}, {"col_block", m.described.col_block}};
    if (m.described.diagonal_block > 0) row["tiling"]["diagonal_block"] = m.described.diagonal_block;
  }
  row["input_sets"] = view.params.input_sets;
  // Context parallelism: what follows is one device's of `cp`, holding N/cp rows.
  row["cp"] = view.ranks;
  row["local_seq"] = view.local.seq;
  row["sent_bytes"] = {{"forward_per_layer", m.ring.forward_sent_bytes},
                       {"backward_per_layer", m.ring.backward_sent_bytes},
                       {"stack", problem.layers * (m.ring.forward_sent_bytes + m.ring.backward_sent_bytes)}};
  row["ring_bytes"] = {{"forward", m.ring.forward_ring_bytes},
                       {"backward", m.ring.backward_ring_bytes},
                       {"recompute_rows", m.ring.recompute_rows_bytes}};
  if (problem.causal)
    row["causal_pairs_per_head"] = {{"zigzag_busiest", busiest_causal_pairs(problem, view.ranks, SeqSplit::zigzag)},
                                    {"contiguous_busiest", busiest_causal_pairs(problem, view.ranks, SeqSplit::contiguous)}};
  row["per_layer"] = {{"output_bytes", m.layer.output_bytes},
                      {"kept_bytes", m.layer.kept_bytes},
                      {"held_bytes", m.layer.held_bytes},
                      {"forward_workspace_bytes", m.layer.forward_workspace_bytes},
                      {"backward_workspace_bytes", m.layer.backward_workspace_bytes},
                      {"grad_bytes", m.layer.grad_bytes}};
  row["memory"]["model"] = {{"peak_bytes", m.stack.peak_bytes},
                            {"peak_phase", std::string(to_string(m.stack.peak_phase))},
                            {"kept_bytes", m.stack.kept_bytes},
                            {"by_tag", tags_json(m.stack.by_tag)}};
  return row;
}

void print_model_json(const ModelView& view) {
  ordered_json rows = ordered_json::array();
  for (const VariantModel& m : view.models) rows.push_back(model_row_json(view, m));
  ordered_json document{{"schema_version", kSchemaVersion}, {"command", "model"}, {"rows", rows}};
  std::cout << document.dump(2) << '\n';
}

// The table's heading: the backend, the problem, the split, the tiles and the inputs; with a causal
// --cp split, how much busier than the mean its busiest device is.
void print_model_heading(const ModelView& view) {
  const Problem& problem = view.problem;
  const ModelParams& params = view.params;
  const int64_t ranks = view.ranks;
  const Row& tiles = view.models.front().described;
  std::cout << fmt::format("memory model, {}: {}{}{}{}; input {} (Q, K, V, dO of each layer{}){}\n\n", view.device.name,
                           problem.describe(),
                           ranks > 1 ? fmt::format(", split over {} devices (ring, {} rows each{}), per device", ranks,
                                                   view.local.seq, problem.causal ? ", zig-zag" : "")
                                     : "", params.threads > 0 ? fmt::format(", {} threads", params.threads) : "",
                           tiles.row_block > 0 ? fmt::format(", tiles {}x{} (Br x Bc)", tiles.row_block, tiles.col_block)
                                               : "",
                           format_bytes(params.input_sets * input_bytes(view.local)),
                           params.input_sets > 1 ? fmt::format(", {} sets rotated", params.input_sets) : "",
                           params.persistent_workspace_bytes > 0
                               ? fmt::format("; library workspace {}", format_bytes(params.persistent_workspace_bytes))
                               : "");
  if (ranks > 1 && problem.causal) {
    const double zigzag = double(busiest_causal_pairs(problem, ranks, SeqSplit::zigzag));
    const double contiguous = double(busiest_causal_pairs(problem, ranks, SeqSplit::contiguous));
    const double mean = double(causal_pairs(problem.seq, 1, 0, SeqSplit::contiguous)) / double(ranks);
    std::cout << fmt::format("causal work of the busiest device / the mean: zig-zag {:.3f}, a contiguous split {:.3f}\n\n",
                             zigzag / mean, contiguous / mean);
  }
}

// The table: a column per variant, a line per quantity, per layer (and the ring's, with --cp) and
// for the stack.
void print_model_table(const ModelView& view) {
  const Problem& problem = view.problem;
  const std::vector<VariantModel>& models = view.models;
  std::vector<std::vector<std::string>> lines;
  std::vector<std::string> header = {"per layer"};
  for (const VariantModel& m : models) header.emplace_back(to_string(m.variant));
  lines.push_back(header);
  auto add = [&](std::string label, auto value_of) {
    std::vector<std::string> line = {std::move(label)};
    for (const VariantModel& m : models) line.push_back(value_of(m));
    lines.push_back(line);
  };
  add("  output O_i", [](const VariantModel& m) { return format_bytes(m.layer.output_bytes); });
  add("  Q, K, V (inputs)", [&](const VariantModel&) { return format_bytes(saved_input_bytes_per_layer(view.local)); });
  add("  kept (kept_per_layer)", [](const VariantModel& m) { return format_bytes(m.layer.kept_bytes); });
  add("  held until its backward", [](const VariantModel& m) { return format_bytes(m.layer.held_bytes); });
  add("  forward workspace", [](const VariantModel& m) { return format_bytes(m.layer.forward_workspace_bytes); });
  add("  backward workspace", [](const VariantModel& m) { return format_bytes(m.layer.backward_workspace_bytes); });
  add("  gradients dQ, dK, dV (+ extra)", [](const VariantModel& m) { return format_bytes(m.layer.grad_bytes); });
  if (view.ranks > 1) {
    lines.push_back({fmt::format("ring of {} devices, per device and layer", view.ranks)});
    add("  in forward workspace", [](const VariantModel& m) { return format_bytes(m.ring.forward_ring_bytes); });
    add("  in backward workspace", [](const VariantModel& m) {
      return format_bytes(m.ring.backward_ring_bytes + m.ring.recompute_rows_bytes);
    });
    add("  sent in forward", [](const VariantModel& m) { return format_bytes(m.ring.forward_sent_bytes); });
    add("  sent in backward", [](const VariantModel& m) { return format_bytes(m.ring.backward_sent_bytes); });
  }
  lines.push_back({"stack of " + counted(problem.layers, "layer")});
  add("  peak", [](const VariantModel& m) { return format_bytes(m.stack.peak_bytes); });
  add("  peak phase", [](const VariantModel& m) { return std::string(to_string(m.stack.peak_phase)); });
  for (Tag tag : kAllTags)
    add(fmt::format("    {} at peak", to_string(tag)),
        [tag](const VariantModel& m) { return format_bytes(m.stack.by_tag[tag]); });
  add("  kept after forward", [](const VariantModel& m) { return format_bytes(m.stack.kept_bytes); });
  if (view.ranks > 1)
    add("  sent, forward + backward", [&problem](const VariantModel& m) {
      return format_bytes(problem.layers * (m.ring.forward_sent_bytes + m.ring.backward_sent_bytes));
    });
  const VariantModel* standard = nullptr;
  for (const VariantModel& m : models)
    if (m.variant == Variant::standard) standard = &m;
  if (standard)
    add("  peak / standard", [standard](const VariantModel& m) {
      return fmt::format("{:.3f}", double(m.stack.peak_bytes) / double(standard->stack.peak_bytes));
    });
  print_table(std::cout, lines);
}

int print_model(const ModelOptions& options) {
  const ModelView view = model_variants(options);
  if (options.format == "json") {
    print_model_json(view);
    return 0;
  }
  print_model_heading(view);
  print_model_table(view);
  return 0;
}

// 1073741824 -> "1,073,741,824"
std::string group_thousands(double value) {
  std::string digits = fmt::format("{:.0f}", value);
  for (int at = int(digits.size()) - 3; at > 0; at -= 3) digits.insert(size_t(at), ",");
  return digits;
}

std::string format_value(const PresetRow& row, double value) {
  if (row.value_kind == "percent") return fmt::format("{:.1f}%", value);
  if (row.value_kind == "count") return group_thousands(value);
  return format_bytes(static_cast<int64_t>(value));
}

// The formula in the document's own unit, so it reads against the printed figure: at the printed
// precision where the document gives an exact figure, with one decimal where it says "about".
std::string format_in_document_units(const PresetRow& row) {
  if (!row.formula) return "-";
  if (row.claim == Claim::none || row.value_kind == "count") return format_value(row, *row.formula);
  const double value = *row.formula / row.unit_bytes;
  const int decimals = row.claim == Claim::exact ? row.decimals : std::max(row.decimals, 1);
  if (row.value_kind == "percent") return fmt::format("{:.{}f}%", value, decimals);
  return fmt::format("{:.{}f} {}", value, decimals, row.unit_label);
}

ordered_json optional_json(const std::optional<double>& value) {
  return value ? ordered_json(*value) : ordered_json(nullptr);
}

// `--preset list`: each preset's name, the name it had first, and its article's title.
int list_presets(const std::string& format) {
  if (format == "json") {
    ordered_json presets = ordered_json::array();
    for (const PresetName& preset : preset_catalogue())
      presets.push_back({{"name", preset.name}, {"alias", preset.alias}, {"title", preset.title}});
    std::cout << presets.dump(2) << '\n';
    return 0;
  }
  const std::vector<PresetName> presets = preset_catalogue();
  size_t name_width = std::string_view("preset").size(), alias_width = std::string_view("also").size();
  for (const PresetName& preset : presets) {
    name_width = std::max(name_width, preset.name.size());
    alias_width = std::max(alias_width, preset.alias.size());
  }
  std::cout << fmt::format("{:<{}}  {:<{}}  {}\n", "preset", name_width, "also", alias_width, "article");
  for (const PresetName& preset : presets)
    std::cout << fmt::format("{:<{}}  {:<{}}  {}\n", preset.name, name_width, preset.alias, alias_width, preset.title);
  return 0;
}

std::string preset_help() {
  std::string help = "An article's figures (docs/articles.md), by name or its old name; list prints them:";
  for (const PresetName& preset : preset_catalogue())
    help += fmt::format("\n  {} ({}): {}", preset.name, preset.alias, preset.title);
  return help;
}

int print_preset(const ModelOptions& options) {
  if (options.preset == "list") return list_presets(options.format);
  const ModelSource model = model_source(registry().device(options.backend), DeviceOptions{.threads = options.threads});
  const Preset preset = make_preset(options.preset, model);
  if (options.format == "json") {
    ordered_json rows = ordered_json::array();
    for (const PresetRow& row : preset.rows)
      rows.push_back({{"quantity", row.quantity},
                      {"published", row.published_text},
                      {"published_value", row.claim == Claim::none ? ordered_json(nullptr)
                                                                   : ordered_json(row.published_value * row.unit_bytes)},
                      {"formula", optional_json(row.formula)},
                      {"head_aware", optional_json(row.head_aware)},
                      {"flashbench", optional_json(row.flashbench)},
                      {"unit", row.value_kind},
                      {"flashbench_what", row.flashbench_what},
                      {"mismatch", row.mismatch},
                      {"explanation", row.explanation}});
    ordered_json document{{"schema_version", kSchemaVersion}, {"command", "model"},
                          {"preset", preset.name},          {"alias", preset.alias},
                          {"title", preset.title},          {"source", preset.source},
                          {"assumptions", preset.assumptions}, {"problem", problem_to_json(preset.problem)},
                          {"threads", model.threads}, {"rows", rows}};
    std::cout << document.dump(2) << '\n';
    return 0;
  }
  std::cout << fmt::format("preset {} ({}): \"{}\"\nsource: {}\nconfiguration: {}; {}\n", preset.name, preset.alias,
                           preset.title, preset.source, preset.problem.describe(), preset.assumptions);
  std::cout << "published and formula: the document's scope and units; head-aware and flashbench: all heads and\n"
               "batch counted, in KiB/MiB/GiB/TiB (powers of 1024)\n\n";
  std::vector<std::vector<std::string>> lines = {
      {"quantity", "as published", "formula", "head-aware", "flashbench", ""}};
  std::vector<std::string> notes;
  for (const PresetRow& row : preset.rows) {
    std::string flag;
    if (row.mismatch) {
      notes.push_back(fmt::format("[{}] {}: {}", notes.size() + 1, row.quantity, row.explanation));
      flag = fmt::format("MISMATCH [{}]", notes.size());
    }
    lines.push_back({row.quantity, row.published_text, format_in_document_units(row),
                     row.head_aware ? format_value(row, *row.head_aware) : "-",
                     row.flashbench ? format_value(row, *row.flashbench) : "-", flag});
  }
  print_table(std::cout, lines);
  std::cout << "\nflashbench column:\n";
  for (const PresetRow& row : preset.rows)
    if (!row.flashbench_what.empty()) std::cout << fmt::format("  {}: {}\n", row.quantity, row.flashbench_what);
  if (!notes.empty()) {
    std::cout << "\npublished vs the document's own formula:\n";
    for (const std::string& note : notes) std::cout << "  " << note << '\n';
  }
  return 0;
}

}  // namespace

void register_model(CLI::App& app) {
  auto options = std::make_shared<ModelOptions>();
  CLI::App* sub = app.add_subcommand(
      "model", "The analytic memory model per tag, per layer and for L layers, without running kernels");
  sub->add_option("--seq", options->problem.seq, "N, sequence length")->capture_default_str();
  sub->add_option("--heads", options->problem.heads, "H, heads")->capture_default_str();
  sub->add_option("--head-dim", options->problem.head_dim, "d, head dim")->capture_default_str();
  CLI::Option* batch = sub->add_option("--batch", options->problem.batch, "B, batch")->capture_default_str();
  sub->add_option_function<int64_t>("--tokens", [options](int64_t value) { options->tokens = value; },
                                    "T = B*N tokens instead of --batch: B = T / N")
      ->excludes(batch);
  sub->add_option("--layers", options->problem.layers, "L, layers in the stack")->capture_default_str();
  sub->add_flag("--causal", options->problem.causal, "Causal mask (the CPU allocates the same either way)");
  add_workload_options(sub, options->problem);
  sub->add_option("--variant", options->variants, "all, or a comma list of " + variant_names())
      ->capture_default_str();
  sub->add_option("--dtype", options->dtype, "Storage dtype of inputs, activations and kept tensors: fp32, bf16, fp16")
      ->capture_default_str();
  sub->add_option("--threads", options->threads, "CPU threads the workspace is sized for (default: all cores)");
  add_isa_option(sub);
  sub->add_option("--backend,--device", options->backend,
                  "Whose implementations to model: " + registry().device_names() + " (no GPU needed)")->capture_default_str();
  sub->add_option("--cp", options->context_parallel,
                  "Context parallelism: N split over this many devices (ring attention; causal: zig-zag); the "
                  "model is one device's, with the bytes each sends per layer")
      ->capture_default_str();
  sub->add_option("--preset", options->preset, preset_help());
  sub->add_option("--format", options->format, "table or json")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "json"}));
  set_action(sub, [options](const std::vector<std::string>&) {
    if (!options->preset.empty() && options->context_parallel != 1)
      throw UsageError("--cp models one configuration; a --preset reproduces a document's single-device figures");
    return options->preset.empty() ? print_model(*options) : print_preset(*options);
  });
}

}  // namespace flashbench::cli
