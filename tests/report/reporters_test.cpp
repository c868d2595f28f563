// Reporter output pinned against expected text, built from rows with known numbers
// (tests/support/report_rows.hpp); units; the JSON contract's keys; atomic writes.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/core/units.hpp"
#include "flashbench/report/files.hpp"
#include "flashbench/report/json.hpp"
#include "flashbench/report/reporter.hpp"
#include "flashbench/report/results_file.hpp"
#include "support/report_rows.hpp"

namespace flashbench {
namespace {

using testing::four_variant_rows;

nlohmann::ordered_json fixed_meta() {
  nlohmann::ordered_json meta;
  meta["tool"] = "flashbench";
  meta["version"] = "9.9.9";
  meta["git"] = "abc123";
  meta["host"]["cpu"] = "Test CPU";
  return meta;
}

// width 0: every column (run --wide); otherwise the table keeps to that many columns.
std::string render(std::string_view format, const std::vector<Row>& rows, bool terminal = false, int width = 0) {
  std::ostringstream out;
  auto reporter = make_reporter(format, out, terminal, width);
  reporter->begin(fixed_meta());
  for (const Row& row : rows) reporter->add(row);
  reporter->finish();
  return out.str();
}

TEST(ReportUnits, DurationsHaveThreeSignificantDigits) {
  EXPECT_EQ(format_duration_ms(0.0512), "0.0512 ms");
  EXPECT_EQ(format_duration_ms(8.123), "8.12 ms");
  EXPECT_EQ(format_duration_ms(81.23), "81.2 ms");
  EXPECT_EQ(format_duration_ms(812.3), "812 ms");
  EXPECT_EQ(format_duration_ms(0.99996), "1.00 ms");
  EXPECT_EQ(format_duration_ms(999.7), "1.00 s");
  EXPECT_EQ(format_duration_ms(1250), "1.25 s");
}

TEST(ReportUnits, BytesUseBinaryUnits) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(64 * 1024 + 512), "64.5 KiB");
  EXPECT_EQ(format_bytes(int64_t{3} << 29), "1.50 GiB");
  // 1023.9 KiB would round to "1024 KiB"; it reads as the next unit instead.
  EXPECT_EQ(format_bytes(1024 * 1024 - 100), "1.00 MiB");
  EXPECT_EQ(format_bytes(int64_t{1} << 40), "1.00 TiB");
}

TEST(ReportUnits, ThroughputSwitchesFromGigaToTera) {
  EXPECT_EQ(format_throughput(0.0085), "8.50 GFLOP/s");
  EXPECT_EQ(format_throughput(0.85), "850 GFLOP/s");
  EXPECT_EQ(format_throughput(123.4), "123 TFLOP/s");
}

TEST(ReportTable, PinnedTextWhenPiped) {
  const std::string expected =
      "flashbench 9.9.9 (abc123), Test CPU\n"
      "\n"
      "cpu: B=1 H=2 N=256 d=32 L=1 fp32, 4 threads\n"
      "variant         fwd      bwd  bwd/fwd      fwd rate      bwd rate      kept     peak  model peak  peak-model  time/std  peak/std         check  status\n"
      "standard    2.00 ms  4.00 ms    2.00x  8.39 GFLOP/s  10.5 GFLOP/s   512 KiB  977 KiB     977 KiB       +0.0%     1.00x     1.00x       2.5e-07  ok\n"
      "v1                -        -        -             -             -         -        -           -           -         -         -             -  oom: needs 2.00 GiB, limit 1.00 GiB\n"
      "v2          1.00 ms  3.00 ms    3.00x  16.8 GFLOP/s  14.0 GFLOP/s  64.5 KiB  293 KiB     283 KiB       +3.4%     0.67x     0.30x       1.2e-06  ok\n"
      "checkpoint  2.00 ms  8.00 ms    4.00x  8.39 GFLOP/s  5.24 GFLOP/s       0 B  244 KiB           -           -     1.67x     0.25x  FAIL 5.0e-01  ok !\n"
      "  warning: checkpoint: check against float64 failed: max relative error 0.5 > tolerance 0.0001\n"
      "\n"
      "legend: - no value; ok ! ok, with the warnings listed under its block; FAIL error above the tolerance (the "
      "run exits 1); oom: an allocation failed\n";
  EXPECT_EQ(render("table", four_variant_rows()), expected);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The default table keeps to the width: the least needed columns give way (the legend names them),
// the oom row's reason moves under the block, free text wraps; --wide (width 0) shows them all.
TEST(ReportTable, KeepsToTheWidthAndWideShowsEveryColumn) {
  std::vector<Row> rows = four_variant_rows();
  rows[0].bwd = summarize({1.2, 2.8, 2.0, 1.3, 2.7, 2.0, 1.4}, 0.02);  // a noise warning to wrap
  std::vector<Row> longer = four_variant_rows();  // a second N: the sweep's summary table follows
  for (Row& row : longer) row.problem.seq = 512;
  rows.insert(rows.end(), longer.begin(), longer.end());
  for (int width : {80, 60}) {
    const std::string text = render("table", rows, true, width);
    for (const std::string& line : lines_of(text)) {
      std::string visible;  // without the colour codes
      for (size_t i = 0; i < line.size(); ++i) {
        if (line[i] == '\033') i = line.find('m', i);
        else visible += line[i];
      }
      EXPECT_LE(visible.size(), size_t(width)) << "'" << visible << "'\n" << text;
    }
    EXPECT_NE(text.find("\n  v1: oom: needs 2.00 GiB, limit 1.00 GiB\n"), std::string::npos) << text;
    std::string unwrapped;  // a wrapped line joined to the one before it again
    for (const std::string& line : lines_of(text)) {
      const bool continued = line.rfind("  ", 0) == 0;
      unwrapped += continued ? ' ' : '\n';
      unwrapped.append(line, continued ? 2 : 0);
    }
    EXPECT_NE(unwrapped.find("--wide adds the columns bwd/fwd, peak-model"), std::string::npos) << text;
    for (const char* kept : {"variant", "fwd", "bwd", "peak", "check", "status"})
      EXPECT_NE(lines_of(text)[3].find(kept), std::string::npos) << kept << "\n" << text;
  }
  const std::string at80 = render("table", rows, false, 80);
  EXPECT_EQ(lines_of(at80)[3].find("fwd rate"), std::string::npos) << at80;
  const std::string wide = render("table", rows, false, 0);
  for (const char* column : {"bwd/fwd", "fwd rate", "bwd rate", "kept", "model peak", "peak-model", "time/std",
                             "peak/std"})
    EXPECT_NE(lines_of(wide)[3].find(column), std::string::npos) << column << "\n" << wide;
  EXPECT_EQ(wide.find("--wide adds"), std::string::npos) << wide;
  EXPECT_NE(wide.find("rule of thumb: 1.5-2x"), std::string::npos) << "the summary's every column: " << wide;
  EXPECT_NE(at80.find("Scaling with N"), std::string::npos) << at80;
  EXPECT_EQ(at80.find("rule of thumb: 1.5-2x"), std::string::npos) << at80;
  EXPECT_GT(lines_of(wide)[3].size(), 100u) << "the rows here need more than the narrow width";
}

// With a ceiling (run --peak) the title promises rates: they are the last columns to go, and where
// even they cannot show, the title no longer promises them. Every block of a run keeps one column
// set, however its numbers fall.
TEST(ReportTable, RatesThatTheTitlePromisesStayAndBlocksKeepOneColumnSet) {
  std::vector<Row> rows = four_variant_rows();
  for (Row& row : rows) row.peak_gflops = 180.0;
  std::vector<Row> slower = four_variant_rows();  // a second N, its times ten times longer
  for (Row& row : slower) {
    row.problem.seq = 512;
    row.peak_gflops = 180.0;
    if (row.status == Status::ok) row.fwd = summarize({20.5, 20.0, 20.2, 20.1, 20.3}, 0.02);
  }
  rows.insert(rows.end(), slower.begin(), slower.end());
  const std::string at100 = render("table", rows, false, 100);
  std::vector<std::string> headers;  // the blocks' header lines (the summary's has no status)
  for (const std::string& line : lines_of(at100))
    if (line.rfind("variant", 0) == 0 && line.find("status") != std::string::npos) headers.push_back(line);
  ASSERT_EQ(headers.size(), 2u) << at100;
  EXPECT_NE(headers[0].find("bwd rate"), std::string::npos) << at100;
  EXPECT_NE(at100.find("rate % of the 180 GFLOP/s sgemm ceiling"), std::string::npos) << at100;
  const auto columns = [](const std::string& header) {  // the names, whatever the widths
    std::vector<std::string> names;
    std::istringstream words(header);
    for (std::string word; words >> word;) names.push_back(word);
    return names;
  };
  EXPECT_EQ(columns(headers[0]), columns(headers[1])) << "one column set per run:\n" << at100;
  const std::string at50 = render("table", rows, false, 50);
  for (const std::string& line : lines_of(at50))
    if (line.rfind("variant", 0) == 0) {
      EXPECT_EQ(line.find("rate"), std::string::npos) << at50;
    }
  EXPECT_EQ(at50.find("rate % of the"), std::string::npos) << "no rate shown, none promised:\n" << at50;
}

// The legend explains the marks and warnings printed, and only those.
TEST(ReportTable, LegendNamesOnlyTheMarksThatAppear) {
  const std::vector<Row> all = four_variant_rows();
  const std::vector<Row> clean = {all[0], all[2]};  // standard and v2: checked, modelled, no warnings
  const std::string quiet = render("table", clean, false, 0);
  EXPECT_EQ(quiet.find("legend:"), std::string::npos) << quiet;
  const std::string fastest = render("table", clean, true, 0);
  EXPECT_NE(fastest.find("legend: * fastest fwd+bwd\n"), std::string::npos) << fastest;

  std::vector<Row> noisy = clean;
  noisy[1].fwd = summarize({0.6, 1.4, 1.0, 0.65, 1.35, 1.0, 0.7}, 0.02);
  const std::string text = render("table", noisy, false, 0);
  const std::string legend = text.substr(text.find("legend: "));
  EXPECT_NE(legend.find("ok ! ok, with the warnings"), std::string::npos) << legend;
  EXPECT_NE(legend.find("noise: "), std::string::npos) << legend;
  EXPECT_NE(legend.find("--max-time"), std::string::npos) << "says what to do: " << legend;
  EXPECT_NE(legend.find("--rounds"), std::string::npos) << legend;
  for (const char* absent : {"FAIL", "oom", "- no value", "skipped", "not checked", "* fastest"})
    EXPECT_EQ(legend.find(absent), std::string::npos) << absent << " is not in the table: " << text;
}

TEST(ReportTable, MarksTheFastestVariantOnlyOnATerminal) {
  const std::string piped = render("table", four_variant_rows(), false);
  const std::string terminal = render("table", four_variant_rows(), true);
  EXPECT_EQ(piped.find('\033'), std::string::npos);
  EXPECT_EQ(piped.find("v2 *"), std::string::npos);
  // v2 has the lowest fwd + bwd (4 ms against 6 and 10): marked and coloured.
  EXPECT_NE(terminal.find("\033[1;32mv2 *"), std::string::npos);
  EXPECT_EQ(terminal.find("standard *"), std::string::npos);
}

TEST(ReportTable, OneBlockPerProblemWithRelativeColumnsPerBlock) {
  std::vector<Row> rows = four_variant_rows();
  std::vector<Row> more = four_variant_rows();
  for (Row& row : more) row.problem.seq = 512;
  rows.insert(rows.end(), more.begin(), more.end());
  const std::string text = render("table", rows);
  EXPECT_NE(text.find("cpu: B=1 H=2 N=256 "), std::string::npos);
  EXPECT_NE(text.find("cpu: B=1 H=2 N=512 "), std::string::npos);
  // The v2 row of each block is relative to its own block's standard.
  size_t count = 0;
  for (size_t at = text.find("0.67x"); at != std::string::npos; at = text.find("0.67x", at + 1)) ++count;
  EXPECT_EQ(count, 2u);
}

TEST(ReportTable, NoisyMeasurementIsWarned) {
  std::vector<Row> rows = four_variant_rows();
  // Samples spread ±40% around 2 ms: the median's confidence interval is far above 2%.
  rows[0].bwd = summarize({1.2, 2.8, 2.0, 1.3, 2.7, 2.0, 1.4}, 0.02);
  const std::string text = render("table", rows);
  EXPECT_NE(text.find("warning: standard: bwd noise"), std::string::npos) << text;
  EXPECT_NE(text.find("above the 2.00% target after 7 samples"), std::string::npos) << text;
}

TEST(ReportMarkdown, PinnedText) {
  std::vector<Row> rows = four_variant_rows();
  rows.resize(2);
  const std::string expected =
      "_flashbench 9.9.9 (abc123), Test CPU_\n"
      "\n"
      "### cpu: B=1 H=2 N=256 d=32 L=1 fp32, 4 threads\n"
      "\n"
      "| variant | fwd | bwd | bwd/fwd | fwd rate | bwd rate | kept | peak | model peak | peak-model | time/std | peak/std | check | status |\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n"
      "| standard | 2.00 ms | 4.00 ms | 2.00x | 8.39 GFLOP/s | 10.5 GFLOP/s | 512 KiB | 977 KiB | 977 KiB | +0.0% | 1.00x | 1.00x | 2.5e-07 | ok |\n"
      "| v1 | - | - | - | - | - | - | - | - | - | - | - | - | oom: needs 2.00 GiB, limit 1.00 GiB |\n";
  EXPECT_EQ(render("md", rows), expected);
}

TEST(ReportCsv, HeaderAndRawNumbers) {
  std::vector<Row> rows = four_variant_rows();
  rows[1].reason = "needs 2 GiB, \"limit\" 1 GiB";  // a comma and quotes must be quoted
  const std::string text = render("csv", rows);
  std::istringstream lines(text);
  std::string header, standard, v1;
  std::getline(lines, header);
  std::getline(lines, standard);
  std::getline(lines, v1);
  const auto starts_with = [](const std::string& line, const std::string& prefix) {
    EXPECT_EQ(line.substr(0, prefix.size()), prefix);
  };
  starts_with(header, "backend,variant,impl,batch,heads,kv_heads,seq,seq_k,head_dim,layers,causal,dropout,expand_kv,"
                      "dtype,status,reason,fwd_m");
  // fwd median 2 ms, mean of 1.98, 2, 2.02, 1.98, 2, 2.02, 1.98 = 13.98 / 7.
  starts_with(standard, "cpu,standard,standard,1,2,2,256,256,32,1,false,0,false,fp32,ok,,2,1.997");
  EXPECT_NE(standard.find(",1000000,bwd,524288,"), std::string::npos) << standard;
  starts_with(v1, "cpu,v1,v1,1,2,2,256,256,32,1,false,0,false,fp32,oom,\"needs 2 GiB, \"\"limit\"\" 1 GiB\",,,,,,0,");
  // Every line has as many fields as the header (no comma inside a field outside quotes here).
  const auto fields = [](const std::string& line) {
    size_t count = 1;
    bool quoted = false;
    for (char c : line) {
      if (c == '"') quoted = !quoted;
      if (c == ',' && !quoted) ++count;
    }
    return count;
  };
  EXPECT_EQ(fields(standard), fields(header));
  EXPECT_EQ(fields(v1), fields(header));
}

// A spreadsheet or pandas keys columns by name: two columns of one name (once `kept_bytes` for the
// kept bytes at the end of forward and for the kept tag at the peak) lose one of them.
TEST(ReportCsv, HeaderNamesAreUniqueAndEachKeptColumnHoldsItsOwnNumber) {
  std::vector<Row> rows = four_variant_rows();
  rows[0].measured.kept_bytes = 111;
  rows[0].measured.by_tag[Tag::kept] = 222;
  std::istringstream lines(render("csv", rows));
  std::string header, standard;
  std::getline(lines, header);
  std::getline(lines, standard);
  const auto split = [](const std::string& line) {  // no quoted commas in these rows
    std::vector<std::string> cells(1);
    for (char c : line) {
      if (c == ',') cells.emplace_back();
      else cells.back() += c;
    }
    return cells;
  };
  const std::vector<std::string> names = split(header);
  std::set<std::string> seen;
  for (const std::string& name : names) EXPECT_TRUE(seen.insert(name).second) << "column '" << name << "' repeats";
  const std::vector<std::string> cells = split(standard);
  ASSERT_EQ(cells.size(), names.size());
  const auto cell = [&](const std::string& name) {
    const auto at = std::find(names.begin(), names.end(), name);
    return at == names.end() ? std::string("(no column)") : cells[size_t(at - names.begin())];
  };
  EXPECT_EQ(cell("kept_bytes"), "111");
  EXPECT_EQ(cell("at_peak_kept_bytes"), "222");
}

TEST(ReportJson, DocumentCarriesSchemaMetaAndTheContractKeys) {
  const std::string text = render("json", four_variant_rows());
  const nlohmann::json document = nlohmann::json::parse(text);
  EXPECT_EQ(document["schema_version"], 1);
  EXPECT_EQ(document["meta"]["git"], "abc123");
  ASSERT_EQ(document["rows"].size(), 4u);
  const nlohmann::json& row = document["rows"][0];
  for (const char* key : {"backend", "variant", "problem", "status", "reason", "timing", "throughput", "memory", "check"})
    EXPECT_TRUE(row.contains(key)) << key;
  for (const char* key : {"batch", "heads", "seq", "head_dim", "layers", "causal", "dtype"})
    EXPECT_TRUE(row["problem"].contains(key)) << key;
  for (const char* phase : {"fwd", "bwd"})
    for (const char* key : {"median_ms", "mean_ms", "stddev_ms", "min_ms", "max_ms", "samples_ms"})
      EXPECT_TRUE(row["timing"][phase].contains(key)) << phase << "." << key;
  EXPECT_DOUBLE_EQ(row["timing"]["fwd"]["median_ms"].get<double>(), 2.0);
  EXPECT_EQ(row["timing"]["bwd"]["samples_ms"].size(), 7u);
  // 4·B·H·N²·d = 4·1·2·256²·32 FLOP in 2 ms.
  EXPECT_DOUBLE_EQ(row["throughput"]["fwd_tflops"].get<double>(), 4.0 * 2 * 256 * 256 * 32 / 2e-3 / 1e12);
  const nlohmann::json& measured = row["memory"]["measured"];
  EXPECT_EQ(measured["peak_bytes"], 1'000'000);
  EXPECT_EQ(measured["peak_phase"], "bwd");
  EXPECT_EQ(measured["kept_bytes"], 524'288);
  int64_t tag_sum = 0;
  for (const char* tag : {"input", "activation", "kept", "workspace", "grad"}) tag_sum += measured["by_tag"][tag].get<int64_t>();
  EXPECT_EQ(tag_sum, 1'000'000);
  EXPECT_TRUE(measured.contains("os_peak_bytes"));
  EXPECT_EQ(row["memory"]["model"]["peak_bytes"], 1'000'000);
  EXPECT_EQ(row["check"]["reference"], "float64");
  EXPECT_DOUBLE_EQ(row["check"]["max_rel_err"].get<double>(), 2.5e-7);
  EXPECT_EQ(row["check"]["passed"], true);
  EXPECT_FALSE(row["check"].contains("tensors"));  // a check made before the breakdown existed
  // Each compared tensor's errors, in the order compared.
  const nlohmann::json& tensors = document["rows"][2]["check"]["tensors"];
  ASSERT_EQ(tensors.size(), 4u);
  EXPECT_LT(text.find("\"O\": {"), text.find("\"dQ\": {"));
  EXPECT_LT(text.find("\"dK\": {"), text.find("\"dV\": {"));
  EXPECT_DOUBLE_EQ(tensors["dQ"]["rel_err"].get<double>(), 1.2e-6);
  EXPECT_DOUBLE_EQ(tensors["dQ"]["naive_rel_err"].get<double>(), 4e-7);
  EXPECT_DOUBLE_EQ(tensors["O"]["rel_err"].get<double>(), 3e-7);
  EXPECT_DOUBLE_EQ(tensors["dV"]["rel_err"].get<double>(), 4e-7);
  EXPECT_FALSE(document["rows"][2]["check"].contains("not_compared"));  // every tensor compared
  // The oom row: status and reason, no times, no model.
  const nlohmann::json& oom = document["rows"][1];
  EXPECT_EQ(oom["status"], "oom");
  EXPECT_EQ(oom["reason"], "needs 2.00 GiB, limit 1.00 GiB");
  EXPECT_TRUE(oom["timing"]["fwd"]["median_ms"].is_null());
  EXPECT_FALSE(oom["memory"].contains("model"));
  EXPECT_EQ(document["rows"][3]["check"]["passed"], false);
  EXPECT_EQ(document["rows"][3]["warnings"].size(), 1u);
}

TEST(ReportJson, RowsRoundTripThroughJson) {
  for (const Row& row : four_variant_rows()) {
    const Row back = row_from_json(nlohmann::json::parse(row_to_json(row).dump()));
    EXPECT_EQ(row_to_json(back).dump(), row_to_json(row).dump());
  }
}

// With a CPU ceiling (run --peak), each rate is also a fraction of it: in the JSON (and back), the
// CSV's last columns and the table's rate cells, whose block title names the ceiling.
TEST(ReportPeak, RatesAreReadAgainstTheCeiling) {
  std::vector<Row> rows = four_variant_rows();
  for (Row& row : rows) row.peak_gflops = 20.0;
  const Row& standard = rows[0];  // fwd 8.39 GFLOP/s, bwd 10.5 GFLOP/s
  ASSERT_TRUE(standard.fwd_of_peak().has_value());
  EXPECT_NEAR(*standard.fwd_of_peak(), standard.fwd_tflops() * 1e3 / 20.0, 1e-12);
  EXPECT_FALSE(rows[1].fwd_of_peak().has_value()) << "an oom row has no rate";
  const nlohmann::ordered_json j = row_to_json(standard);
  EXPECT_EQ(j["throughput"]["peak_gflops"], 20.0);
  EXPECT_NEAR(j["throughput"]["bwd_of_peak"].get<double>(), standard.bwd_tflops() * 1e3 / 20.0, 1e-12);
  EXPECT_TRUE(row_to_json(rows[1])["throughput"]["fwd_of_peak"].is_null());
  const Row back = row_from_json(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(back.peak_gflops, 20.0);
  EXPECT_EQ(row_to_json(back).dump(), j.dump());

  const std::string table = render("table", rows);
  EXPECT_NE(table.find("4 threads; rate % of the 20 GFLOP/s sgemm ceiling"), std::string::npos) << table;
  EXPECT_NE(table.find("8.39 GFLOP/s 42%"), std::string::npos) << table;
  EXPECT_NE(table.find("10.5 GFLOP/s 52%"), std::string::npos) << table;

  std::istringstream csv(render("csv", rows));
  std::string header, line;
  std::getline(csv, header);
  std::getline(csv, line);
  EXPECT_EQ(header.substr(header.size() - 35), "peak_gflops,fwd_of_peak,bwd_of_peak");
  EXPECT_EQ(line.substr(line.rfind(",20,") + 1, 9), "20,0.4194") << line;
}

TEST(ReportJson, MissingRequiredKeyIsAUsageError) {
  nlohmann::json row = nlohmann::json::parse(row_to_json(four_variant_rows()[0]).dump());
  row.erase("problem");
  EXPECT_THROW(row_from_json(row), UsageError);
}

TEST(ReportJsonLines, MetaLineThenOneLinePerRow) {
  const std::string text = render("jsonl", four_variant_rows());
  std::istringstream lines(text);
  std::string line;
  std::vector<nlohmann::json> records;
  while (std::getline(lines, line)) records.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(records.size(), 5u);
  EXPECT_EQ(records[0]["schema_version"], 1);
  EXPECT_EQ(records[0]["meta"]["version"], "9.9.9");
  EXPECT_EQ(records[3]["variant"], "v2");
}

TEST(ReportJsonLines, EachRowIsWrittenWhenAdded) {
  std::ostringstream out;
  auto reporter = make_reporter("jsonl", out, false);
  reporter->begin(fixed_meta());
  reporter->add(four_variant_rows()[0]);
  EXPECT_NE(out.str().find("\"variant\":\"standard\""), std::string::npos);
}

TEST(ReportFactory, UnknownFormatIsAUsageError) {
  std::ostringstream out;
  EXPECT_THROW(make_reporter("xml", out, false), UsageError);
}

TEST(ReportMeta, HasToolBuildHostTimeAndArgv) {
  const nlohmann::ordered_json meta = make_meta({"flashbench", "run", "--seq", "64"});
  EXPECT_EQ(meta["tool"], "flashbench");
  for (const char* key : {"version", "git", "build", "host", "time", "argv"}) EXPECT_TRUE(meta.contains(key)) << key;
  for (const char* key : {"type", "compiler", "flags", "cuda"}) EXPECT_TRUE(meta["build"].contains(key)) << key;
  for (const char* key : {"cpu", "cores", "omp_threads", "hostname"}) EXPECT_TRUE(meta["host"].contains(key)) << key;
  EXPECT_EQ(meta["argv"][3], "64");
  const std::string time = meta["time"];
  ASSERT_EQ(time.size(), 20u);  // 2026-11-29T10:00:00Z
  EXPECT_EQ(time[10], 'T');
  EXPECT_EQ(time.back(), 'Z');
  EXPECT_FALSE(meta.contains("gpu"));
}

// The device adds its own block to the metadata (CUDA: "gpu"); the table's first line names it.
TEST(ReportMeta, TableNamesTheGpuOfTheMeta) {
  nlohmann::ordered_json meta = make_meta({});
  meta["gpu"]["name"] = "Fake GPU";
  std::ostringstream out;
  std::unique_ptr<Reporter> table = make_reporter("table", out, false);
  table->begin(meta);
  table->finish();
  EXPECT_NE(out.str().find(", Fake GPU"), std::string::npos) << out.str();
}

class AtomicWrite : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = std::filesystem::temp_directory_path() /
                 ("flashbench-atomic-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(directory_);
    std::filesystem::create_directories(directory_);
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }
  std::filesystem::path directory_;
};

// A pipe (or a device) named as the output is written into, never replaced by a regular file.
TEST_F(AtomicWrite, APipeIsWrittenIntoNotReplaced) {
  const std::string pipe = (directory_ / "pipe").string();
  ASSERT_EQ(mkfifo(pipe.c_str(), 0600), 0);
  const int reader = ::open(pipe.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  write_file_atomically(pipe, "rows\n");
  char buffer[16] = {};
  const ssize_t n = ::read(reader, buffer, sizeof buffer);
  ::close(reader);
  EXPECT_EQ(std::string(buffer, n > 0 ? size_t(n) : 0), "rows\n");
  EXPECT_TRUE(std::filesystem::is_fifo(pipe)) << "the pipe was replaced";
}

TEST_F(AtomicWrite, ADirectoryIsRefused) {
  EXPECT_THROW(write_file_atomically(directory_.string(), "rows\n"), RuntimeFailure);
  EXPECT_TRUE(std::filesystem::is_directory(directory_));
}

TEST_F(AtomicWrite, ReplacesTheFileAndLeavesNoTemporary) {
  const std::string path = (directory_ / "out.json").string();
  write_file_atomically(path, "first");
  write_file_atomically(path, "second\n");
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "second\n");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(directory_), std::filesystem::directory_iterator()), 1);
}

TEST_F(AtomicWrite, FailureThrowsAndLeavesNothing) {
  const std::string path = (directory_ / "missing-dir" / "out.json").string();
  EXPECT_THROW(write_file_atomically(path, "x"), RuntimeFailure);
  // The target is a directory: the rename fails after the temporary file was written.
  const std::filesystem::path blocker = directory_ / "blocker";
  std::filesystem::create_directories(blocker / "inside");
  EXPECT_THROW(write_file_atomically(blocker.string(), "x"), RuntimeFailure);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(directory_), std::filesystem::directory_iterator()), 1);
}

TEST(ReadResultsFile, ReadsJsonAndJsonLines) {
  const auto directory = std::filesystem::temp_directory_path();
  const std::string json_path = (directory / "flashbench-read-test.json").string();
  const std::string jsonl_path = (directory / "flashbench-read-test.jsonl").string();
  write_file_atomically(json_path, render("json", four_variant_rows()));
  write_file_atomically(jsonl_path, render("jsonl", four_variant_rows()));
  const ResultsFile a = read_results_file(json_path);
  const ResultsFile b = read_results_file(jsonl_path);
  std::filesystem::remove(json_path);
  std::filesystem::remove(jsonl_path);
  ASSERT_EQ(a.rows.size(), 4u);
  ASSERT_EQ(b.rows.size(), 4u);
  EXPECT_EQ(a.meta["git"], "abc123");
  EXPECT_EQ(b.meta["git"], "abc123");
  EXPECT_EQ(a.rows[2].variant, Variant::v2);
  EXPECT_DOUBLE_EQ(b.rows[2].bwd.median_ms, 3.0);
}

}  // namespace
}  // namespace flashbench

// The sgemm ceiling takes OpenBLAS's rate only where its kernels are no wider than the run's: under
// --isa avx2 on an AVX-512 machine, OpenBLAS's AVX-512 sgemm is not a ceiling for AVX2 kernels.
TEST(PeakCeiling, OpenBlasCountsOnlyWhereItsVectorsAreNoWider) {
  flashbench::PeakReport peak;
  peak.sgemm_gflops = 500;
  peak.openblas_gflops = 1000;
  peak.openblas_core = "Cooperlake";
  peak.simd = "avx512";
  EXPECT_EQ(flashbench::sgemm_ceiling(peak), 1000);
  EXPECT_EQ(flashbench::sgemm_ceiling_from(peak), "openblas");
  EXPECT_FALSE(flashbench::openblas_left_out(peak));

  peak.simd = "avx2";
  EXPECT_EQ(flashbench::sgemm_ceiling(peak), 500);
  EXPECT_EQ(flashbench::sgemm_ceiling_from(peak), "flashbench");
  ASSERT_TRUE(flashbench::openblas_left_out(peak));
  EXPECT_NE(flashbench::openblas_left_out(peak)->find("Cooperlake kernels use avx512"), std::string::npos);

  peak.openblas_core = "Zen";  // Haswell's AVX2 kernels: comparable with avx2, wider than scalar
  EXPECT_EQ(flashbench::sgemm_ceiling(peak), 1000);
  peak.simd = "scalar";
  EXPECT_EQ(flashbench::sgemm_ceiling(peak), 500);
  peak.openblas_core = "Prescott";  // an older family than flashbench names: counted, as before
  EXPECT_EQ(flashbench::sgemm_ceiling(peak), 1000);
}
