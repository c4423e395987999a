// tools/bench_gemm_virtual.cu — `tilewire bench gemm --virtual P`: the plain GEMM as each rank of a
// virtual team runs it. P ranks on GPU 0 (tw::Comm::run_virtual: one host thread each), each with
// its own inputs, all on the same shape at the same time (so they share HBM and the L2 as a
// team's ranks do), each on its SM budget B = comm.sm_count() (the GPU's SMs / P):
//   tilewire  tw::gemm with GemmConfig::reserved_sms = the SMs outside the budget (+ --reserved-sms),
//             as the sequential path's GEMM runs on a virtual team (src/ops/gemm/team_gemm.cpp)
//   cuBLASLt  CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET = B - --reserved-sms (LtMatmul's sm_count: its
//             algorithm and persistent grids sized to it); where the library refuses the attribute,
//             the row says "whole GPU"
//
//   per shape, every rank   its (A, B, C) sets (seeded by rank; rank 0's are bench_gemm.cu's)
//   per --plans entry       barrier; every rank: testing::set_gemm_plan (its thread's); barrier
//                           vote: the plan runs on every rank (else the row says why not)
//                           check: every set, every element against cuBLASLt's (bench_gemm.cu's bound)
//                           warm-up of both, ungated; then R repeats of tilewire and cuBLASLt in
//                           alternation, each behind the start gate (bench_gate.hpp):
//                             gate.hold; ev0; `iters` calls; ev1; barrier; rank 0: gate.open
//                           rank 0: the row from every rank's medians
//
// Time: per rank, the median over the repeats of (ev1 - ev0) / iters; a row has the slowest
// rank's (the team waits for it) and the '#' line the fastest's. A repeat is enqueued whole before
// its gate opens, so no host launch time is in the GPU times (the host time per call, the slowest
// rank's, is printed beside them). TF/s: one rank's, 2 M N K / its time (the team does P times as
// much). Rotation: each rank's sets, P ranks together, exceed twice the L2, so a set is not cached
// when its rank comes back to it. #wrong: summed over the ranks.
#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench_args.hpp"  // median
#include "bench_gate.hpp"  // HostBarrier, StartGate
#include "bench_gemm.hpp"
#include "bench_raii.hpp"
#include "testing/measurement.hpp"  // testing::set_gemm_plan
#include "ops/gemm/team_gemm.hpp"  // gemm_impl::sms_outside_budget
#include "ops/gemm/cublaslt.hpp"
#include "tilewire/ops/gemm.hpp"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw::cli::gemm_bench {
namespace {

// What one rank measured for one (shape, plan).
struct Sample {
  bool ran = false;  // the plan ran here; else refusal says why
  Errc refusal_code = Errc::kState;
  std::string refusal;
  std::string tw_plan, cublas_algo;  // gemm_plan(), LtMatmul::describe()
  bool cublas_budget = false;        // cuBLASLt took the SM count target
  double tw_us = 0, cublas_us = 0, tw_host_us = 0, cublas_host_us = 0;
  unsigned long long wrong = 0;
  bool gate_expired = false;
};

// One (shape, plan) over the team.
struct Row {
  Shape s;
  std::string plan_spec, tw_plan, cublas_algo;
  bool cublas_budget = false;                 // every rank's cuBLASLt took the SM count target
  double tw_us = 0, cublas_us = 0;            // the slowest rank's median
  double tw_fast_us = 0, cublas_fast_us = 0;  // the fastest rank's
  double tw_host_us = 0, cublas_host_us = 0;  // the slowest rank's host time per call
  std::vector<double> tw_rank_us, cublas_rank_us;
  unsigned long long wrong = 0;
  bool gate_expired = false;  // some repeat started without waiting for every rank (times hold launch skew)
  double tflops(double us) const { return us > 0 ? 2.0 * s.m * s.n * s.k / (us * 1e-6) / 1e12 : 0; }
};

// Shared by the rank threads: samples[r] is written by rank r and read by rank 0 between barriers;
// rows by rank 0 only.
struct Team {
  Team(int P, const cudaDeviceProp& prop) : barrier(P), samples(P), prop(prop) {}
  // The first failure, kept before the barrier breaks (the peers' "another rank failed" follow it).
  void fail(std::exception_ptr e) noexcept {
    {
      std::lock_guard<std::mutex> lk(mu);
      if (!first_error) first_error = e;
    }
    barrier.break_all();
  }
  HostBarrier barrier;
  StartGate gate;
  std::mutex mu;
  std::vector<Sample> samples;
  std::vector<Row> rows;
  const cudaDeviceProp prop;
  int sm_budget = 0, tw_reserved = 0, cublas_sms = 0;  // rank 0's: comm.sm_count(), and what each GEMM got
  std::exception_ptr first_error;
};

struct PairTimes {
  double a_us = 0, b_us = 0, a_host_us = 0, b_host_us = 0;
};

class RankRun {
 public:
  RankRun(Comm& comm, const GemmBenchArgs& a, Team& t) : comm_(comm), a_(a), t_(t), me_(comm.rank()) {
    cfg_ = a.cfg;
    cfg_.reserved_sms = a.cfg.reserved_sms + gemm_impl::sms_outside_budget(comm);
    cublas_sms_ = comm.sm_count() - a.cfg.reserved_sms;
    TW_REQUIRE(cublas_sms_ >= 1, kInvalidArgument,
               "bench gemm --virtual: --reserved-sms " + std::to_string(a.cfg.reserved_sms) +
                   " leaves no SM of a rank's budget of " + std::to_string(comm.sm_count()));
    if (me_ == 0) {
      t_.sm_budget = comm.sm_count();
      t_.tw_reserved = cfg_.reserved_sms;
      t_.cublas_sms = cublas_sms_;
      print_header();
    }
  }

  void run() {
    for (const Shape& s : a_.shapes) shape(s);
    t_.barrier.arrive_and_wait("end of sweep");
  }

 private:
  void print_header() const {
    const cudaDeviceProp& p = t_.prop;
    std::printf("# tilewire bench gemm: %s, %d SMs, L2 %d MiB; %s, B %s, reserved_sms %d, swizzle %d\n", p.name,
                p.multiProcessorCount, p.l2CacheSize >> 20, dtype_name(a_.dtype), blayout_name(a_.layout),
                a_.cfg.reserved_sms, a_.cfg.swizzle);
    std::printf("# virtual team of %d ranks on GPU 0, all at once, own inputs each; SM budget %d per rank: tilewire "
                "reserved_sms %d, cuBLASLt SM_COUNT_TARGET %d\n",
                comm_.nranks(), t_.sm_budget, t_.tw_reserved, t_.cublas_sms);
    std::printf("# times: per call, the slowest rank's median of %d gated repeats of %d calls; TF/s: one rank's\n",
                a_.repeats, a_.iters);
    std::printf("%7s %7s %7s %10s %9s %10s %9s %7s %7s\n", "M", "N", "K", "tw_us", "tw_TF/s", "cublas_us",
                "cublas_TF", "ratio", "#wrong");
    std::fflush(stdout);
  }

  // Times per call of `iters` calls on this rank, behind the start gate: every rank enqueues its
  // whole repeat, then rank 0 lets all of them go at once. GPU us; host us (enqueueing) in *host_us.
  template <class F> double gated_repeat(F&& call, double* host_us) {
    const uint32_t gen = ++gate_gen_;  // the same sequence on every rank
    t_.gate.hold(st_.s, gen);
    TW_CUDA_CHECK(cudaEventRecord(e0_.e, st_.s));
    const auto h0 = std::chrono::steady_clock::now();
    for (int i = 0; i < a_.iters; ++i) call(i);
    *host_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count() / a_.iters;
    TW_CUDA_CHECK(cudaEventRecord(e1_.e, st_.s));
    t_.barrier.arrive_and_wait("start gate");  // every rank has enqueued its whole repeat
    if (me_ == 0) t_.gate.open(gen);
    comm_.sync(st_.s);
    gate_expired_ = gate_expired_ || t_.gate.expired(gen);
    float ms = 0;
    TW_CUDA_CHECK(cudaEventElapsedTime(&ms, e0_.e, e1_.e));
    return ms * 1e3 / a_.iters;
  }

  // GPU ms of n ungated calls (the warm-up).
  template <class F> double ungated_ms(F&& call, int n) {
    TW_CUDA_CHECK(cudaEventRecord(e0_.e, st_.s));
    for (int i = 0; i < n; ++i) call(i);
    TW_CUDA_CHECK(cudaEventRecord(e1_.e, st_.s));
    comm_.sync(st_.s);
    float ms = 0;
    TW_CUDA_CHECK(cudaEventElapsedTime(&ms, e0_.e, e1_.e));
    return ms;
  }

  // bench_gemm.cu's time_pair_us with every repeat gated: a warm-up of both (each rank its own, at
  // once) of at least warm_ms of GPU time, then the repeats in alternation (A B, B A, ...).
  template <class FA, class FB> PairTimes time_pair(FA&& a, FB&& b, double warm_ms) {
    double warmed = 0;
    for (int round = 0; round < 1000 && (round == 0 || warmed < warm_ms); ++round)
      warmed += ungated_ms(a, std::max(1, a_.warmup)) + ungated_ms(b, std::max(1, a_.warmup));
    std::vector<double> ta, tb, ha, hb;
    double h = 0;
    auto time_a = [&] { ta.push_back(gated_repeat(a, &h)), ha.push_back(h); };
    auto time_b = [&] { tb.push_back(gated_repeat(b, &h)), hb.push_back(h); };
    for (int r = 0; r < a_.repeats; ++r) {
      if (r % 2 == 0) time_a(), time_b();
      else time_b(), time_a();
    }
    return {median(ta), median(tb), median(ha), median(hb)};
  }

  // Publish this rank's sample; after the call every rank's is in t_.samples (read them, then
  // call done_reading before anyone publishes again).
  void publish(const Sample& smp, const char* where) {
    {
      std::lock_guard<std::mutex> lk(t_.mu);
      t_.samples[me_] = smp;
    }
    t_.barrier.arrive_and_wait(where);
  }
  void done_reading(const char* where) { t_.barrier.arrive_and_wait(where); }

  // Every rank's (A, B, C) sets: P ranks' together > 2x L2 (at least 2 each, at most 64), within
  // half of the memory free when the shape starts.
  int rotation_sets(size_t set_bytes) {
    const int P = comm_.nranks();
    t_.barrier.arrive_and_wait("shape start: previous buffers freed");
    size_t free_b = 0, total_b = 0;
    TW_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));  // read by every rank while none allocates
    t_.barrier.arrive_and_wait("free memory read");
    const size_t want = std::max<size_t>(2, 2 * size_t(t_.prop.l2CacheSize) / (P * set_bytes) + 1);
    const size_t afford = free_b / 2 / P / set_bytes;
    return (int)std::max<size_t>(1, std::min<size_t>({want, 64, afford}));
  }

  void shape(Shape s) {
    const size_t na = size_t(s.m) * s.k, nb = size_t(s.n) * s.k, nc = size_t(s.m) * s.n;
    const int sets = rotation_sets(2 * (na + nb + nc));
    std::vector<DeviceBuffer> A, B, C;
    const uint64_t rank_seed = uint64_t(me_) << 32;
    for (int i = 0; i < sets; ++i) {
      A.emplace_back(2 * na), B.emplace_back(2 * nb), C.emplace_back(2 * nc);
      fill_operand(A[i].p, na, a_.dtype, rank_seed + 1000 + i, st_.s);
      fill_operand(B[i].p, nb, a_.dtype, rank_seed + 2000 + i, st_.s);
    }
    const size_t ws_bytes = 64 << 20;
    DeviceBuffer ref(2 * nc), ws(ws_bytes), wrong(sizeof(unsigned long long));
    const lt::LtMatmul mm(lt_.get(), s.m, s.n, s.k, a_.layout, ws_bytes, a_.dtype, cublas_sms_);
    auto cublas = [&](int i, void* out) { mm.run(A[i % sets].p, B[i % sets].p, out, ws.p, st_.s); };
    auto tilewire = [&](int i) {
      const int j = i % sets;
      gemm(GemmArgs{A[j].p, B[j].p, C[j].p, s.m, s.n, s.k, a_.dtype, a_.layout}, cfg_, st_.s);
    };
    const bool many = a_.plans.size() > 1;
    bool first_timed = true;
    const size_t shape_rows = t_.rows.size();  // rank 0's rows of this shape start here
    for (const std::string& spec : a_.plans) {
      t_.barrier.arrive_and_wait("plan: no rank inside tw::gemm");
      testing::set_gemm_plan(measurement_plan_of(spec));
      t_.barrier.arrive_and_wait("plan set");
      Sample smp;
      smp.cublas_algo = mm.describe();
      smp.cublas_budget = mm.sm_count_target() == cublas_sms_;
      try {
        smp.tw_plan = gemm_plan(GemmArgs{A[0].p, B[0].p, C[0].p, s.m, s.n, s.k, a_.dtype, a_.layout}, cfg_);
        tilewire(0);  // a plan the kernel refuses for this shape is reported, and the sweep goes on
        smp.ran = true;
      } catch (const Error& e) {
        smp.refusal_code = e.code();
        smp.refusal = e.what();
      }
      publish(smp, "plan vote");
      const Sample* refused = nullptr;
      for (const Sample& x : t_.samples)
        if (!x.ran && !refused) refused = &x;
      const Sample why = refused ? *refused : Sample{};
      done_reading("plan vote read");
      if (refused) {
        if (a_.plans.size() == 1) throw Error(why.refusal_code, why.refusal);  // on every rank, as one rank would
        if (me_ == 0)
          std::printf("# %d x %d x %d, plan %s: not run: %s\n", s.m, s.n, s.k, spec.c_str(), why.refusal.c_str());
        continue;
      }
      TW_CUDA_CHECK(cudaMemsetAsync(wrong.p, 0, sizeof(unsigned long long), st_.s));
      for (int j = 0; j < sets; ++j) {  // every set checked once, before timing
        tilewire(j);
        cublas(j, ref.p);
        count_wrong_async(C[j].p, ref.p, nc, a_.dtype, static_cast<unsigned long long*>(wrong.p), st_.s);
      }
      TW_CUDA_CHECK(cudaGetLastError());
      gate_expired_ = false;
      // The clocks are down already after the shape's first plan: a tenth of the warm-up after it.
      const PairTimes t = time_pair(tilewire, [&](int i) { cublas(i, C[i % sets].p); },
                                    first_timed ? kWarmMs : kWarmMs / 10);
      first_timed = false;
      smp.tw_us = t.a_us, smp.cublas_us = t.b_us, smp.tw_host_us = t.a_host_us, smp.cublas_host_us = t.b_host_us;
      smp.gate_expired = gate_expired_;
      TW_CUDA_CHECK(cudaMemcpyAsync(&smp.wrong, wrong.p, sizeof(smp.wrong), cudaMemcpyDeviceToHost, st_.s));
      comm_.sync(st_.s);
      publish(smp, "samples written");
      if (me_ == 0) {
        t_.rows.push_back(team_row(s, spec));
        print_row(t_.rows.back(), many);
      }
      done_reading("samples read");
    }
    t_.barrier.arrive_and_wait("shape's plans done");
    testing::set_gemm_plan(std::nullopt);
    if (me_ == 0) {
      const Row* best = nullptr;
      for (size_t i = shape_rows; i < t_.rows.size(); ++i) {
        const Row& r = t_.rows[i];
        if (r.wrong == 0 && (!best || r.cublas_us / r.tw_us > best->cublas_us / best->tw_us)) best = &r;
      }
      if (many && best) std::printf("#   best: %s (%.3f)\n", best->plan_spec.c_str(), best->cublas_us / best->tw_us);
      std::fflush(stdout);
    }
  }

  // Rank 0, between "samples written" and "samples read": the row from every rank's sample.
  Row team_row(Shape s, const std::string& spec) const {
    Row r;
    r.s = s;
    r.plan_spec = spec;
    r.tw_plan = t_.samples[0].tw_plan;
    r.cublas_algo = t_.samples[0].cublas_algo;
    r.cublas_budget = true;
    r.tw_fast_us = r.cublas_fast_us = 1e300;
    for (const Sample& x : t_.samples) {
      r.tw_rank_us.push_back(x.tw_us), r.cublas_rank_us.push_back(x.cublas_us);
      r.tw_us = std::max(r.tw_us, x.tw_us), r.tw_fast_us = std::min(r.tw_fast_us, x.tw_us);
      r.cublas_us = std::max(r.cublas_us, x.cublas_us), r.cublas_fast_us = std::min(r.cublas_fast_us, x.cublas_us);
      r.tw_host_us = std::max(r.tw_host_us, x.tw_host_us);
      r.cublas_host_us = std::max(r.cublas_host_us, x.cublas_host_us);
      r.wrong += x.wrong;
      r.gate_expired = r.gate_expired || x.gate_expired;
      r.cublas_budget = r.cublas_budget && x.cublas_budget;
    }
    return r;
  }

  static void print_row(const Row& r, bool many) {
    const Shape& s = r.s;
    std::printf("%7d %7d %7d %10.1f %9.1f %10.1f %9.1f %7.3f %7llu\n", s.m, s.n, s.k, r.tw_us, r.tflops(r.tw_us),
                r.cublas_us, r.tflops(r.cublas_us), r.tflops(r.tw_us) / r.tflops(r.cublas_us), r.wrong);
    std::printf("#   %s%stilewire: %s | cublasLt: %s%s | host us/call %.1f / %.1f | fastest rank %.1f / %.1f us%s\n",
                many ? r.plan_spec.c_str() : "", many ? " -> " : "", r.tw_plan.c_str(), r.cublas_algo.c_str(),
                r.cublas_budget ? "" : " (whole GPU: SM_COUNT_TARGET refused)", r.tw_host_us, r.cublas_host_us,
                r.tw_fast_us, r.cublas_fast_us, r.gate_expired ? " | GATE EXPIRED: times include launch skew" : "");
    std::fflush(stdout);
  }

  Comm& comm_;
  const GemmBenchArgs& a_;
  Team& t_;
  const int me_;
  GemmConfig cfg_;      // a_.cfg, reserved_sms + the SMs outside the budget
  int cublas_sms_ = 0;  // cuBLASLt's SM count target
  Stream st_;
  Event e0_, e1_;
  lt::LtHandle lt_;  // made on the rank's thread, which run_virtual put on GPU 0
  uint32_t gate_gen_ = 0;
  bool gate_expired_ = false;
};

std::string to_json(const GemmBenchArgs& a, const Team& t, int P, bool ok) {
  std::ostringstream o;
  auto list = [&](const std::vector<double>& v) {
    o << "[";
    for (size_t i = 0; i < v.size(); ++i) o << (i ? "," : "") << v[i];
    o << "]";
  };
  o << "{\"device\":\"" << t.prop.name << "\",\"dtype\":\"" << dtype_name(a.dtype) << "\",\"layout\":\""
    << blayout_name(a.layout) << "\",\"reserved_sms\":" << a.cfg.reserved_sms << ",\"swizzle\":" << a.cfg.swizzle
    << ",\"virtual_ranks\":" << P << ",\"sm_budget\":" << t.sm_budget << ",\"tw_reserved_sms\":" << t.tw_reserved
    << ",\"cublas_sm_count_target\":" << t.cublas_sms << ",\"rows\":[";
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const Row& r = t.rows[i];
    o << (i ? "," : "") << "{\"m\":" << r.s.m << ",\"n\":" << r.s.n << ",\"k\":" << r.s.k << ",\"tw_us\":" << r.tw_us
      << ",\"tw_tflops\":" << r.tflops(r.tw_us) << ",\"cublas_us\":" << r.cublas_us
      << ",\"cublas_tflops\":" << r.tflops(r.cublas_us) << ",\"tw_host_us\":" << r.tw_host_us
      << ",\"cublas_host_us\":" << r.cublas_host_us << ",\"ratio\":" << r.tflops(r.tw_us) / r.tflops(r.cublas_us)
      << ",\"wrong\":" << r.wrong << ",\"plan_spec\":\"" << r.plan_spec << "\",\"tw_plan\":\"" << r.tw_plan
      << "\",\"cublas_algo\":\"" << r.cublas_algo
      << "\",\"cublas_sm_target_taken\":" << (r.cublas_budget ? "true" : "false")
      << ",\"gate_expired\":" << (r.gate_expired ? "true" : "false") << ",\"tw_us_per_rank\":";
    list(r.tw_rank_us);
    o << ",\"cublas_us_per_rank\":";
    list(r.cublas_rank_us);
    o << "}";
  }
  o << "],\"ok\":" << (ok ? "true" : "false") << "}\n";
  return o.str();
}

}  // namespace

int bench_gemm_virtual(const GemmBenchArgs& a) {
  const int P = a.virtual_ranks;
  lt::lt_api();  // no cuBLASLt: one line now, not one per rank thread later
  std::ofstream json;  // opened now so a bad path fails before minutes of measurement
  if (!a.json_path.empty()) {
    json.open(a.json_path, std::ios::out | std::ios::trunc);
    TW_REQUIRE(json.good(), kInvalidArgument,
               "--json " + a.json_path + ": cannot open for writing (" + std::strerror(errno) + ")");
  }
  cudaDeviceProp prop{};
  TW_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  Team team(P, prop);
  try {
    Comm::run_virtual(0, P, [&](Comm& comm) {
      try {
        RankRun(comm, a, team).run();
      } catch (...) {
        team.fail(std::current_exception());  // peers waiting on the host throw instead of waiting for this rank
        throw;
      }
    });
  } catch (...) {
    if (json.is_open()) {  // no half-written evidence: the file appears only for a finished sweep
      json.close();
      std::remove(a.json_path.c_str());
    }
    if (team.first_error) std::rethrow_exception(team.first_error);
    throw;
  }
  const bool ok = std::all_of(team.rows.begin(), team.rows.end(), [](const Row& r) { return r.wrong == 0; });
  if (json.is_open()) {
    json << to_json(a, team, P, ok);
    json.close();
    TW_REQUIRE(!json.fail(), kState, "--json " + a.json_path + ": write failed");
    std::printf("# wrote %s\n", a.json_path.c_str());
  }
  return ok ? 0 : 1;
}

}  // namespace tw::cli::gemm_bench
