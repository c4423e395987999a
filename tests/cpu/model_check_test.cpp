// scripts/model_check.py (the cost model against a run on real GPUs) on bench JSON written here,
// each shape's model line made by the library's own predictions_line: the script must read the
// prediction at the run's rank count that predict() gives, pick what prefers_fused picks, compute
// the errors and kAuto's regret from the measured times, ignore rows that are not the fused path,
// and skip virtual-team runs.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ops/fused_gemm/cost_model.hpp"

namespace {

namespace fg = tw::fused_gemm;

struct Shape {
  fg::FusedOp op;
  int64_t M, N, K;
  int P;
  double gemm_us, fused_us, seq_us;
};

std::string line_for(const Shape& s) { return fg::predictions_line(s.op, fg::Shape{s.M, s.N, s.K, 2}, s.gemm_us); }

// A gemm-allreduce run's row; path "sequential" rows are not the fused path and must be ignored.
std::string gar_row(const Shape& s, const char* path) {
  std::ostringstream o;
  o << "{\"M\": " << s.M << ", \"N\": " << s.N << ", \"K_local\": " << s.K << ", \"t_gemm_us\": " << s.gemm_us
    << ", \"t_gemm_tw_us\": " << s.seq_us << ", \"path\": \"" << path << "\", \"t_fused_us\": " << s.fused_us
    << ", \"model\": \"" << line_for(s) << "\"}";
  return o.str();
}

// A gemm-rs / ag-gemm run's shape: (a) the GEMM alone, (g) op fused, (l) op sequential.
std::string tp_shape(const Shape& s) {
  std::ostringstream o;
  o << "{\"name\": \"t\", \"M\": " << s.M << ", \"N\": " << s.N << ", \"K\": " << s.K << ", \"model\": \""
    << line_for(s) << "\", \"rows\": [{\"op\": \"(a) tw-gemm\", \"ran\": true, \"us\": " << s.gemm_us
    << "}, {\"op\": \"(c) seq cublas+nccl\", \"ran\": false, \"us\": -1}, {\"op\": \"(g) op fused\", \"ran\": true, "
       "\"us\": "
    << s.fused_us << "}, {\"op\": \"(l) op sequential\", \"ran\": true, \"us\": " << s.seq_us << "}]}";
  return o.str();
}

std::vector<std::map<std::string, std::string>> read_tsv(const std::string& path) {
  std::ifstream f(path);
  std::string line, cell;
  std::vector<std::string> head;
  std::vector<std::map<std::string, std::string>> rows;
  for (bool first = true; std::getline(f, line); first = false) {
    std::vector<std::string> cells;
    std::istringstream ls(line);
    while (std::getline(ls, cell, '\t')) cells.push_back(cell);
    if (first) {
      head = cells;
      continue;
    }
    std::map<std::string, std::string> r;
    for (size_t i = 0; i < cells.size() && i < head.size(); ++i) r[head[i]] = cells[i];
    rows.push_back(r);
  }
  return rows;
}

TEST(ModelCheck, ReadsTheModelAtTheRunsRankCount) {
  const std::string script = std::string(TILEWIRE_SOURCE_DIR) + "/scripts/model_check.py";
  ASSERT_EQ(access(script.c_str(), R_OK), 0) << script;
  if (std::system("python3 -c '' >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 is not installed";

  // Real runs: the all-reduce at 4 ranks (fused measured faster, then slower), the reduce-scatter
  // at 2; a virtual-team all-gather run that must be skipped.
  const Shape ar1{fg::FusedOp::kGemmAllReduce, 8192, 8192, 4096, 4, 740.0, 951.3, 1362.8};
  const Shape ar2{fg::FusedOp::kGemmAllReduce, 2048, 8192, 4096, 4, 180.0, 297.1, 283.4};
  const Shape ar_seq{fg::FusedOp::kGemmAllReduce, 512, 8192, 4096, 4, 47.0, 81.0, 80.0};
  const Shape rs{fg::FusedOp::kGemmReduceScatter, 8192, 8192, 2048, 2, 385.0, 470.5, 590.2};
  const Shape ag{fg::FusedOp::kAllGatherGemm, 4096, 2048, 8192, 4, 190.0, 260.0, 230.0};

  char dir[] = "/tmp/tw_model_check.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string jsonl = std::string(dir) + "/b.jsonl", tsv = std::string(dir) + "/c.tsv";
  {
    std::ofstream f(jsonl);
    f << "{\"bench\": \"gemm-allreduce\", \"nranks\": 4, \"backend\": \"lsa\", \"rows\": [" << gar_row(ar1, "fused")
      << ", " << gar_row(ar_seq, "sequential") << ", " << gar_row(ar2, "fused") << "]}\n";
    f << "{\"bench\": \"gemm-rs\", \"ranks\": 2, \"virtual\": false, \"shapes\": [" << tp_shape(rs) << "]}\n";
    f << "{\"bench\": \"ag-gemm\", \"ranks\": 4, \"virtual\": true, \"shapes\": [" << tp_shape(ag) << "]}\n";
  }
  const int st = std::system(("python3 '" + script + "' '" + jsonl + "' --tsv '" + tsv + "' >/dev/null").c_str());
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "model_check.py failed";
  const auto rows = read_tsv(tsv);
  std::remove(jsonl.c_str());
  std::remove(tsv.c_str());
  rmdir(dir);

  const Shape* want[] = {&ar1, &ar2, &rs};
  ASSERT_EQ(rows.size(), 3u) << "the sequential row and the virtual run must not be listed";
  for (size_t i = 0; i < 3; ++i) {
    const Shape& s = *want[i];
    const auto& r = rows[i];
    SCOPED_TRACE(r.at("op") + " " + r.at("M") + "x" + r.at("N") + "x" + r.at("K"));
    EXPECT_EQ(r.at("op"), fg::op_name(s.op));
    EXPECT_EQ(std::stoll(r.at("M")), s.M);
    EXPECT_EQ(std::stoi(r.at("P")), s.P);
    EXPECT_EQ(r.at("virtual"), "False");
    const fg::Shape fs{s.M, s.N, s.K, 2};
    const fg::Prediction p = fg::predict(s.op, fs, s.P, s.gemm_us, fg::default_overhead(s.op, fs, s.P));
    EXPECT_NEAR(std::stod(r.at("model_fused_us")), p.fused_us, 0.051);  // the line prints 0.1 us
    EXPECT_NEAR(std::stod(r.at("model_seq_us")), p.sequential_us, 0.051);
    EXPECT_EQ(r.at("pick"), fg::prefers_fused(p) ? "fused" : "seq");
    EXPECT_NEAR(std::stod(r.at("err_fused")), s.fused_us / p.fused_us - 1.0, 1e-3);
    EXPECT_NEAR(std::stod(r.at("err_seq")), s.seq_us / p.sequential_us - 1.0, 1e-3);
    EXPECT_EQ(r.at("faster"), s.fused_us < s.seq_us ? "fused" : "seq");
    const double picked = fg::prefers_fused(p) ? s.fused_us : s.seq_us;
    EXPECT_NEAR(std::stod(r.at("regret")), picked / std::min(s.fused_us, s.seq_us) - 1.0, 1e-5);
  }
}

}  // namespace
