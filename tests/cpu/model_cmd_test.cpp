// CPU tests for `tilewire model` (tools/model_cmd.hpp): its rows are the cost model's own
// predictions at the shapes and team sizes asked for, --gemm-us and --overhead replace the
// estimate and the measured default, the report names kAuto's pick, and a bad command line is
// refused naming the option. Also the list parser the benches share (parse_int_list).
#include "model_cmd.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench_args.hpp"
#include "cpu_util.hpp"
#include "tilewire/runtime/errors.hpp"

namespace {

namespace fg = tw::fused_gemm;
using tw::cli::ModelArgs;

ModelArgs parse(std::vector<std::string> v) { return tw::cli::parse_model_args(std::span<const std::string>(v)); }

// A refused command line: kInvalidArgument, its message naming the fault.
void expect_rejected(std::vector<std::string> v, const std::string& fragment) {
  const tw::Error e = tw_test::catch_tw([&] { parse(v); });
  EXPECT_EQ(e.code(), tw::Errc::kInvalidArgument) << e.what();
  EXPECT_TRUE(tw_test::contains(e.what(), fragment));
}

TEST(ModelCommand, RowsAreTheModelsPredictions) {
  const ModelArgs a = parse({"gemm-rs", "-m", "1024,8192", "-n", "8192", "-k", "2048", "-P", "2,8"});
  EXPECT_EQ(a.op, fg::FusedOp::kGemmReduceScatter);
  const auto rows = tw::cli::model_rows(a);
  ASSERT_EQ(rows.size(), 4u);
  const int want_m[] = {1024, 1024, 8192, 8192}, want_p[] = {2, 8, 2, 8};
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    EXPECT_EQ(r.M, want_m[i]);
    EXPECT_EQ(r.P, want_p[i]);
    const fg::Shape s{r.M, 8192, 2048, 2};
    const double gemm = fg::estimate_gemm_us(r.M, 8192, 2048, 2);
    const double ov = fg::default_overhead(fg::FusedOp::kGemmReduceScatter, s, r.P);
    const fg::Prediction p = fg::predict(fg::FusedOp::kGemmReduceScatter, s, r.P, gemm, ov);
    EXPECT_TRUE(r.gemm_estimated);
    EXPECT_DOUBLE_EQ(r.gemm_us, gemm);
    EXPECT_DOUBLE_EQ(r.overhead, ov);
    EXPECT_DOUBLE_EQ(r.p.fused_us, p.fused_us);
    EXPECT_DOUBLE_EQ(r.p.sequential_us, p.sequential_us);
    EXPECT_EQ(r.fused, fg::prefers_fused(p));
  }
}

TEST(ModelCommand, MeasuredGemmAndOverheadReplaceTheDefaults) {
  const ModelArgs a = parse({"gemm-allreduce", "-m", "8192", "-n", "8192", "-k", "4096", "-P", "4", "--gemm-us",
                             "736.7", "--overhead", "0.5"});
  const auto rows = tw::cli::model_rows(a);
  ASSERT_EQ(rows.size(), 1u);
  const fg::Prediction p = fg::predict(fg::FusedOp::kGemmAllReduce, fg::Shape{8192, 8192, 4096, 2}, 4, 736.7, 0.5);
  EXPECT_FALSE(rows[0].gemm_estimated);
  EXPECT_DOUBLE_EQ(rows[0].gemm_us, 736.7);
  EXPECT_DOUBLE_EQ(rows[0].overhead, 0.5);
  EXPECT_DOUBLE_EQ(rows[0].p.fused_us, p.fused_us);
  // A larger overhead can only make the fused path slower.
  const fg::Prediction lean = fg::predict(fg::FusedOp::kGemmAllReduce, fg::Shape{8192, 8192, 4096, 2}, 4, 736.7, 0.0);
  EXPECT_GT(rows[0].p.fused_us, lean.fused_us);
}

TEST(ModelCommand, ReportNamesThePick) {
  // ag-gemm at the 70B attention output: the pull crosses the link once per column tile, so the
  // model keeps the sequential path; gemm-rs on the same shape fuses (docs/fused_gemm.md).
  ModelArgs ag = parse({"ag-gemm", "-m", "8192", "-n", "2048", "-k", "8192", "-P", "4"});
  ModelArgs rs = parse({"gemm-rs", "-m", "8192", "-n", "8192", "-k", "2048", "-P", "4"});
  ASSERT_FALSE(tw::cli::model_rows(ag).at(0).fused);
  ASSERT_TRUE(tw::cli::model_rows(rs).at(0).fused);
  const std::string t_ag = tw::cli::model_report(ag), t_rs = tw::cli::model_report(rs);
  EXPECT_NE(t_ag.find("sequential\n"), std::string::npos) << t_ag;
  EXPECT_NE(t_rs.find("fused\n"), std::string::npos) << t_rs;
  rs.json = true;
  const std::string j = tw::cli::model_report(rs);
  EXPECT_NE(j.find("\"op\": \"gemm_reducescatter\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"P\": 4"), std::string::npos) << j;
  EXPECT_NE(j.find("\"pick\": \"fused\""), std::string::npos) << j;
}

TEST(ModelCommand, BadCommandLinesNameTheOption) {
  expect_rejected({}, "name the op");
  expect_rejected({"gemm-ar", "-m", "1", "-n", "1", "-k", "1"}, "unknown op 'gemm-ar'");
  expect_rejected({"gemm-rs", "-n", "8192", "-k", "2048"}, "-m, -n and -k are required");
  expect_rejected({"gemm-rs", "-m", "1024", "-n", "0", "-k", "2048"}, "model: -n takes positive integers");
  expect_rejected({"gemm-rs", "-m", "1024,x", "-n", "8192", "-k", "2048"}, "model: -m takes positive integers");
  expect_rejected({"gemm-rs", "-m", "1024", "-n", "8192,4096", "-k", "2048"}, "model: -n takes one value");
  expect_rejected({"gemm-rs", "-m", "1024", "-n", "8192", "-k", "2048", "-P", "16"}, "-P takes team sizes 2..8");
  expect_rejected({"gemm-rs", "-m", "1024", "-n", "8192", "-k", "2048", "-P", "1"}, "-P takes team sizes 2..8");
  expect_rejected({"gemm-rs", "-m", "1024,2048", "-n", "8192", "-k", "2048", "--gemm-us", "100"},
                  "--gemm-us is one shape");
  expect_rejected({"gemm-rs", "-m", "1024", "-n", "8192", "-k", "2048", "--gemm-us", "-3"}, "--gemm-us takes a time");
  expect_rejected({"gemm-rs", "-m", "1024", "-n", "8192", "-k", "2048", "--overhead", "-1"},
                  "--overhead takes a fraction");
  expect_rejected({"gemm-rs", "-m", "1024", "-n", "8192", "-k"}, "-k needs a value");
  expect_rejected({"gemm-rs", "-m", "1024", "-n", "8192", "-k", "2048", "--fast", "1"}, "unknown option '--fast'");
  EXPECT_TRUE(parse({"--help"}).help);
}

TEST(ParseIntList, ListsAndErrors) {
  EXPECT_EQ(tw::cli::parse_int_list("16,64,256", "bench: -m"), (std::vector<int>{16, 64, 256}));
  for (const char* bad : {"", "0", "3,", "1,,2", "-4", "2.5", "1073741824"}) {
    SCOPED_TRACE(std::string("'") + bad + "'");
    const tw::Error e = tw_test::catch_tw([&] { tw::cli::parse_int_list(bad, "bench: -m"); });
    EXPECT_EQ(e.code(), tw::Errc::kInvalidArgument);
    EXPECT_TRUE(tw_test::contains(e.what(), "bench: -m takes positive integers, got '" + std::string(bad) + "'"));
  }
}

}  // namespace
