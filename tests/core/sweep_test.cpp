// Axis lists and ranges, sweep files, the cartesian product, and flags overriding a file.
#include <filesystem>
#include <fstream>
#include <functional>

#include <gtest/gtest.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/sweep.hpp"

#include "support/sweep_fixtures.hpp"

namespace flashbench {
namespace {

using testing::usage_message;

using Values = std::vector<int64_t>;

TEST(ParseIntList, SingleValuesAndCommaLists) {
  EXPECT_EQ(parse_int_list("4096", "--seq"), Values({4096}));
  EXPECT_EQ(parse_int_list("1,2, 3", "--seq"), Values({1, 2, 3}));
}

TEST(ParseIntList, GeometricAndArithmeticRanges) {
  EXPECT_EQ(parse_int_list("512:8192:x2", "--seq"), Values({512, 1024, 2048, 4096, 8192}));
  EXPECT_EQ(parse_int_list("64:256:+64", "--head-dim"), Values({64, 128, 192, 256}));
  EXPECT_EQ(parse_int_list("100:1000:x3", "--seq"), Values({100, 300, 900}));  // stops below the end
  EXPECT_EQ(parse_int_list("7:7:x2", "--seq"), Values({7}));
  EXPECT_EQ(parse_int_list("1,256:1024:x2", "--seq"), Values({1, 256, 512, 1024}));
}

TEST(ParseIntList, RejectsBadTokensNamingFlagAndToken) {
  EXPECT_EQ(usage_message([] { parse_int_list("0", "--seq"); }), "--seq: '0' must be positive");
  EXPECT_EQ(usage_message([] { parse_int_list("128,-4", "--heads"); }), "--heads: '-4' must be positive");
  EXPECT_EQ(usage_message([] { parse_int_list("12a", "--seq"); }), "--seq: '12a' is not an integer");
  EXPECT_EQ(usage_message([] { parse_int_list("", "--seq"); }), "--seq: empty list");
  EXPECT_EQ(usage_message([] { parse_int_list("1,,2", "--seq"); }), "--seq: '1,,2' has an empty item");
  EXPECT_EQ(usage_message([] { parse_int_list("512:64:x2", "--seq"); }), "--seq: '512:64:x2' ends below its start");
  EXPECT_EQ(usage_message([] { parse_int_list("64:512:x1", "--seq"); }),
            "--seq: '64:512:x1' needs a factor of at least 2");
  EXPECT_EQ(usage_message([] { parse_int_list("64:512:2", "--seq"); }),
            "--seq: '64:512:2' needs a step 'xFACTOR' (geometric) or '+STEP' (arithmetic)");
  EXPECT_EQ(usage_message([] { parse_int_list("64:512", "--seq"); }),
            "--seq: '64:512' is not a range START:END:xFACTOR or START:END:+STEP");
  EXPECT_EQ(usage_message([] { parse_int_list("99999999999999999999", "--seq"); }),
            "--seq: '99999999999999999999' is too large");
  EXPECT_NE(usage_message([] { parse_int_list("1:100000:+1", "--seq"); }).find("more than 4096 values"),
            std::string::npos);
}

TEST(ParseLists, BoolsAndVariants) {
  EXPECT_EQ(parse_bool_list("both", "--causal"), std::vector<bool>({false, true}));
  EXPECT_EQ(parse_bool_list("true", "--causal"), std::vector<bool>({true}));
  EXPECT_EQ(usage_message([] { parse_bool_list("maybe", "--causal"); }),
            "--causal: 'maybe' is not true, false or both");
  EXPECT_EQ(parse_variant_list("all", "--variant").size(), 4u);
  EXPECT_EQ(parse_variant_list("v2,standard", "--variant"), std::vector<Variant>({Variant::v2, Variant::standard}));
  EXPECT_EQ(usage_message([] { parse_variant_list("v2,v2", "--variant"); }), "--variant: 'v2' is listed twice");
  EXPECT_NE(usage_message([] { parse_variant_list("v3", "--variant"); }).find("--variant: unknown variant 'v3'"),
            std::string::npos);
}

TEST(Expand, CartesianProductWithSeqInnermost) {
  SweepSpec spec;
  spec.seq = {128, 256, 512};
  spec.heads = {1, 2};
  spec.causal = {false, true};
  const std::vector<Problem> problems = expand(spec);
  ASSERT_EQ(problems.size(), 12u);
  EXPECT_EQ(problems[0].seq, 128);
  EXPECT_EQ(problems[1].seq, 256);
  EXPECT_EQ(problems[2].seq, 512);
  EXPECT_EQ(problems[3].heads, 2);
  EXPECT_FALSE(problems[5].causal);
  EXPECT_TRUE(problems[6].causal);
}

TEST(Expand, ValidatesEachProblem) {
  SweepSpec spec;
  spec.head_dim = {64, 512};
  EXPECT_THROW(expand(spec), UsageError);
}

// --tokens T: B = T / N per configuration; a T that an N does not divide names both.
TEST(Expand, TokensSetTheBatchPerSequenceLength) {
  SweepSpec spec;
  spec.seq = {1024, 4096, 16384};
  spec.tokens = {16384, 32768};
  const std::vector<Problem> problems = expand(spec);
  ASSERT_EQ(problems.size(), 6u);
  for (const Problem& p : problems) EXPECT_TRUE(p.batch * p.seq == 16384 || p.batch * p.seq == 32768);
  EXPECT_EQ(problems[0].batch, 16);
  EXPECT_EQ(problems[2].batch, 1);
  EXPECT_EQ(problems[3].batch, 32);
  spec.seq = {1024, 3000};
  EXPECT_EQ(usage_message([&] { expand(spec); }),
            "--tokens 16384 is not a multiple of N = 3000: B = tokens / N must be a whole number");
  spec.seq = {32768};
  EXPECT_NE(usage_message([&] { expand(spec); }).find("N = 32768"), std::string::npos);
}

// Tokens replace the batch in a sweep file and in its record, which reads back the same; the flag and
// --batch exclude each other, and the flag overrides a file's batch (and --batch a file's tokens).
TEST(SweepFile, TokensRoundTripAndExcludeTheBatch) {
  SweepSpec spec = parse_sweep_json(R"({"seq": [512, 1024], "tokens": 2048})", "t.json");
  EXPECT_EQ(spec.tokens, Values({2048}));
  const nlohmann::ordered_json record = sweep_to_json(spec);
  EXPECT_FALSE(record.contains("batch"));
  EXPECT_EQ(parse_sweep_json(record.dump(), "record").tokens, Values({2048}));
  EXPECT_FALSE(sweep_to_json(SweepSpec{}).contains("tokens"));  // older sweeps keep their keys and hash
  EXPECT_EQ(usage_message([] { parse_sweep_json(R"({"batch": 2, "tokens": 2048})", "t.json"); }),
            "t.json: batch and tokens both set B: give one (tokens T makes B = T / N)");
  SweepOverrides both;
  both.batch = "2";
  both.tokens = "2048";
  EXPECT_EQ(usage_message([&] { apply_overrides(spec, both); }),
            "--batch and --tokens both set B: give one (--tokens T makes B = T / N)");
  SweepOverrides batch;
  batch.batch = "4";
  apply_overrides(spec, batch);
  EXPECT_TRUE(spec.tokens.empty());
  EXPECT_EQ(expand(spec)[1].batch, 4);
  SweepSpec from_batch_file = parse_sweep_json(R"({"seq": 512, "batch": 8})", "b.json");
  SweepOverrides tokens;
  tokens.tokens = "1024";
  apply_overrides(from_batch_file, tokens);
  EXPECT_EQ(expand(from_batch_file)[0].batch, 2);
}

TEST(SweepFile, ParsesAxesRangesAndSampling) {
  const SweepSpec spec = parse_sweep_json(R"({
      "description": "d", "seq": "256:1024:x2", "heads": [2, 4], "head_dim": 64, "batch": [1],
      "layers": ["1,2"], "causal": [false, true], "dtype": "fp32", "variants": ["v2", "standard"],
      "backend": "cpu", "threads": 2,
      "sampling": {"warmup": 2, "warmup_ms": 5, "min_samples": 6, "max_samples": 50, "max_noise": 0.03, "max_time_s": 1.5}})",
                                          "test.json");
  EXPECT_EQ(spec.seq, Values({256, 512, 1024}));
  EXPECT_EQ(spec.heads, Values({2, 4}));
  EXPECT_EQ(spec.layers, Values({1, 2}));
  EXPECT_EQ(spec.causal, std::vector<bool>({false, true}));
  EXPECT_EQ(spec.variants, std::vector<Variant>({Variant::v2, Variant::standard}));
  EXPECT_EQ(spec.threads, 2);
  EXPECT_EQ(spec.sampling.warmup, 2);
  EXPECT_DOUBLE_EQ(spec.sampling.warmup_ms, 5);
  EXPECT_EQ(spec.sampling.min_samples, 6);
  EXPECT_EQ(spec.sampling.max_samples, 50);
  EXPECT_DOUBLE_EQ(spec.sampling.max_noise, 0.03);
  EXPECT_DOUBLE_EQ(spec.sampling.max_time_s, 1.5);
  EXPECT_EQ(expand(spec).size(), 3u * 2 * 2 * 2);
}

TEST(SweepFile, ErrorsNameTheFileAndTheKey) {
  EXPECT_EQ(usage_message([] { parse_sweep_json(R"({"sequence": 4})", "f.json"); }), "f.json: unknown key 'sequence'");
  EXPECT_EQ(usage_message([] { parse_sweep_json(R"({"seq": "0,4"})", "f.json"); }), "f.json: seq: '0' must be positive");
  EXPECT_EQ(usage_message([] { parse_sweep_json(R"({"sampling": {"noise": 1}})", "f.json"); }),
            "f.json: unknown key 'sampling.noise'");
  EXPECT_EQ(usage_message([] { parse_sweep_json(R"({"seq": 16, "seq_q": 32})", "f.json"); }),
            "f.json: seq and seq_q both set N: give one");
  EXPECT_NE(usage_message([] { parse_sweep_json("{", "f.json"); }).find("f.json: not valid JSON"), std::string::npos);
  EXPECT_EQ(usage_message([] { load_sweep_file("/nonexistent/x.json"); }), "--config: cannot read '/nonexistent/x.json': No such file or directory");
}

TEST(SweepFile, FlagsOverrideTheFile) {
  const auto path = std::filesystem::temp_directory_path() / "flashbench-sweep-test.json";
  std::ofstream(path) << R"({"seq": [128, 256], "heads": 4, "sampling": {"max_time_s": 3, "min_samples": 7}})";
  SweepOverrides overrides;
  overrides.seq = "64";
  overrides.max_time_s = 0.5;
  const SweepSpec spec = resolve_sweep(path.string(), overrides);
  std::filesystem::remove(path);
  EXPECT_EQ(spec.seq, Values({64}));
  EXPECT_EQ(spec.heads, Values({4}));  // from the file
  EXPECT_DOUBLE_EQ(spec.sampling.max_time_s, 0.5);
  EXPECT_EQ(spec.sampling.min_samples, 7);
  overrides.min_samples = 2;
  EXPECT_THROW(resolve_sweep(std::nullopt, overrides), UsageError);
}

// The shipped sweep files parse, and their products are valid problems.
TEST(SweepFile, ShippedConfigsLoad) {
  for (const char* name : {"quick", "seed-002", "scaling", "long-context", "gqa", "dropout"}) {
    const SweepSpec spec = load_sweep_file(std::string(FLASHBENCH_SOURCE_DIR) + "/configs/" + name + ".json");
    EXPECT_FALSE(expand(spec).empty()) << name;
    EXPECT_NO_THROW(validate(spec.sampling)) << name;
  }
  const SweepSpec scaling = load_sweep_file(std::string(FLASHBENCH_SOURCE_DIR) + "/configs/scaling.json");
  EXPECT_EQ(scaling.seq.front(), 256);
  EXPECT_EQ(scaling.seq.back(), 16384);
}

// The GQA sweep: H = 32 over G = 1, 4, 8, 32, native beside expanded where G < H (G = 32 has nothing
// to repeat), two N each; the dropout sweep: p = 0, 0.1, 0.2.
TEST(SweepFile, GqaAndDropoutSweeps) {
  const std::vector<Problem> gqa = expand(load_sweep_file(std::string(FLASHBENCH_SOURCE_DIR) + "/configs/gqa.json"));
  EXPECT_EQ(gqa.size(), size_t((3 * 2 + 1) * 2));
  int64_t expanded = 0;
  for (const Problem& p : gqa) {
    EXPECT_EQ(p.heads, 32);
    expanded += p.repeats_kv();
  }
  EXPECT_EQ(expanded, 3 * 2);
  const std::vector<Problem> dropout =
      expand(load_sweep_file(std::string(FLASHBENCH_SOURCE_DIR) + "/configs/dropout.json"));
  ASSERT_EQ(dropout.size(), size_t(3 * 2));
  EXPECT_EQ(dropout.front().dropout, 0.0);
  EXPECT_EQ(dropout.back().dropout, 0.2);
}

// --seq sets N and N_k together, --seq-q N alone, --seq-k N_k; G must divide H.
TEST(SweepFlags, SequenceAndKvHeadAxes) {
  SweepOverrides overrides;
  overrides.seq = "100,200";
  overrides.seq_k = "300";
  overrides.kv_heads = "2";
  overrides.heads = "4";
  overrides.dropout = "0.1";
  const std::vector<Problem> problems = expand(resolve_sweep(std::nullopt, overrides));
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[1].seq, 200);
  EXPECT_EQ(problems[1].key_seq(), 300);
  EXPECT_EQ(problems[1].key_heads(), 2);
  EXPECT_DOUBLE_EQ(problems[1].dropout, 0.1);
  overrides.seq_q = "64";
  EXPECT_THROW(resolve_sweep(std::nullopt, overrides), UsageError);  // --seq and --seq-q both
  SweepOverrides bad;
  bad.heads = "6";
  bad.kv_heads = "4";
  EXPECT_THROW(expand(resolve_sweep(std::nullopt, bad)), UsageError);
  bad.kv_heads = "3";
  bad.dropout = "1.5";
  EXPECT_THROW(resolve_sweep(std::nullopt, bad), UsageError);
}

}  // namespace
}  // namespace flashbench
