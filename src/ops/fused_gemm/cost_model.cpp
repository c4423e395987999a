// The fused-vs-sequential cost model (cost_model.hpp; docs/fused_gemm.md, "The cost model
// (kAuto)"). Every constant here is stated with its source there.
#include "cost_model.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include "tilewire/runtime/errors.hpp"

namespace tw::fused_gemm {

namespace {

// bytes / (GB/s) in us, and flops / (TFLOP/s) in us.
double us_for_bytes(double bytes, double gbps) { return bytes / (gbps * 1e3); }
double us_for_flops(double flops, double tflops) { return flops / (tflops * 1e6); }

// Bytes the collective moves per rank and direction, over its payload: f in f * bytes / busbw.
double coll_factor(FusedOp op, int P) {
  const double p = P;
  return op == FusedOp::kGemmAllReduce ? 2.0 * (p - 1.0) / p : (p - 1.0) / p;
}

// The collective's payload: C for the all-reduce and the reduce-scatter (the whole partial),
// the gathered A for the all-gather.
double coll_bytes(FusedOp op, const Shape& s) {
  const double rows = static_cast<double>(s.M) * s.dtype_bytes;
  return op == FusedOp::kAllGatherGemm ? rows * static_cast<double>(s.K) : rows * static_cast<double>(s.N);
}

void check_shape(const Shape& s) {
  TW_REQUIRE(s.M > 0 && s.N > 0 && s.K > 0, kInvalidArgument,
             "fused cost model: M, N, K must be positive (got " + std::to_string(s.M) + " x " + std::to_string(s.N) +
                 " x " + std::to_string(s.K) + ")");
  TW_REQUIRE(s.dtype_bytes == 2, kInvalidArgument,
             "fused cost model: dtype_bytes " + std::to_string(s.dtype_bytes) +
                 ": its rates are bf16/fp16 (2-byte) figures; no other dtype is modelled");
}

}  // namespace

const char* op_name(FusedOp op) {
  switch (op) {
    case FusedOp::kGemmAllReduce:
      return "gemm_allreduce";
    case FusedOp::kGemmReduceScatter:
      return "gemm_reducescatter";
    case FusedOp::kAllGatherGemm:
      return "allgather_gemm";
  }
  return "?";
}

double LinkModel::busbw_gbps(int P) const {
  TW_REQUIRE(P >= 2 && P <= 8, kInvalidArgument,
             "fused cost model: P = " + std::to_string(P) +
                 ": the model covers 2..8 ranks of one NVLink domain (at one rank the ops run the GEMM alone)");
  return P == 2 ? busbw_gbps_p2 : P <= 4 ? busbw_gbps_p4 : busbw_gbps_p8;
}

LinkModel h200_nvlink() { return LinkModel{}; }

LinkModel h200_nvlink_nccl() {
  LinkModel m;
  m.name = "H200 NVLink, NCCL";
  // (b) - (a) of the same grids: within 10% from 4 MiB up; NCCL's 2 MiB point (27 us for
  // 14 us at 1 MiB) is its own protocol switch and no straight line fits it.
  m.coll_latency_us = 15.0;
  m.busbw_gbps_p2 = m.busbw_gbps_p4 = m.busbw_gbps_p8 = 280.0;
  return m;
}

double estimate_gemm_us(int64_t M, int64_t N, int64_t K, int dtype_bytes, const LinkModel& link) {
  check_shape(Shape{M, N, K, dtype_bytes});
  const double m = M, n = N, k = K;
  const double compute = us_for_flops(2.0 * m * n * k, link.gemm_tflops);
  const double memory = us_for_bytes((m * k + k * n + m * n) * dtype_bytes, link.hbm_tbps * 1e3);
  return std::max(compute, memory) + link.gemm_fixed_us;
}

bool decode_path(FusedOp op, const Shape& s) {
  (void)op;  // all three: gemm_allreduce/decode.cu, gemm_scatter_gather/{allgather_fused,reducescatter_decode}.cu
  return s.M <= 256;
}

FusedKernel fused_tile(FusedOp op, const Shape& s) {
  (void)op;  // all three fused kernels take the decode tile at M <= 256 (plan.hpp kDecodeMaxM)
  return s.M <= 256 ? FusedKernel{128, 64, 0} : FusedKernel{128, 256, 0};
}

double default_overhead(FusedOp op, const Shape& s, int P) {
  const bool decode = s.M <= 256;
  switch (op) {
    case FusedOp::kGemmAllReduce:
      return decode ? 0.07 : P == 2 ? 0.02 : 0.14;
    case FusedOp::kGemmReduceScatter:
      return decode ? 0.0 : 0.12;
    case FusedOp::kAllGatherGemm:
      return decode ? 0.0 : 0.04;
  }
  return 0.0;
}

Prediction predict(FusedOp op, const Shape& s, int P, double t_gemm_us, double overhead, const LinkModel& link,
                   FusedKernel kernel) {
  check_shape(s);
  const double bw = link.busbw_gbps(P);  // checks P
  TW_REQUIRE(link.sms > 0 && bw > 0 && link.cta_push_gbps > 0 && link.sm_peak_tflops > 0, kInvalidArgument,
             std::string("fused cost model: LinkModel '") + link.name +
                 "' needs positive sms, busbw, cta_push_gbps and sm_peak_tflops");
  TW_REQUIRE(t_gemm_us > 0, kInvalidArgument,
             "fused cost model: t_gemm_us must be positive (measure the GEMM or use estimate_gemm_us)");
  TW_REQUIRE(overhead > -1.0, kInvalidArgument,
             "fused cost model: overhead " + std::to_string(overhead) +
                 " <= -1 would make the fused GEMM take no time; pass fused/GEMM - 1");
  // The library's choice (no kernel given) at M <= 256 is the plain GEMM and one kernel beside it.
  const bool plain = (kernel.tile_m <= 0 || kernel.tile_n <= 0) && decode_path(op, s);
  if (kernel.tile_m <= 0 || kernel.tile_n <= 0) {
    const int hops = kernel.hops;
    kernel = fused_tile(op, s);
    kernel.hops = hops;
  }
  const int64_t tile_m = kernel.tile_m, tile_n = kernel.tile_n;

  const double f = coll_factor(op, P);
  const double bytes = coll_bytes(op, s);
  const double link_us = us_for_bytes(f * bytes, bw);  // the payload at busbw, no latency

  Prediction r;
  r.coll_us = link.coll_latency_us + link_us;
  r.sequential_us = t_gemm_us + r.coll_us;

  // The fused kernel's GEMM: never faster than its own tiles at the SM's peak, waves of one
  // tile per SM (a one-wave grid of 128 x 256 tiles at M = 128 takes a whole tile's time).
  const int64_t tiles = ((s.M + tile_m - 1) / tile_m) * ((s.N + tile_n - 1) / tile_n);
  const int64_t waves = (tiles + link.sms - 1) / link.sms;
  const double t_tile = us_for_flops(2.0 * static_cast<double>(tile_m * tile_n) * static_cast<double>(s.K),
                                     link.sm_peak_tflops / link.sms);
  const double g_base = std::max(t_gemm_us, static_cast<double>(waves) * t_tile);
  const double scale = 1.0 + overhead;
  r.gemm_us = g_base * scale;

  if (plain) {
    // The gather before the plain GEMM, or the reduce (the all-reduce in place) after it: one
    // kernel each, two barriers and the collective's bytes at busbw, not hidden
    // (gemm_scatter_gather/allgather_fused.cu, reducescatter_decode.cu, gemm_allreduce/decode.cu).
    // What it saves against the sequential path is the collective's launch latency.
    const double c = 2.0 * link.flag_latency_us + link_us;
    r.fused_us = r.gemm_us + c;
    r.break_even_overhead = (r.sequential_us - c) / g_base - 1.0;
  } else if (op == FusedOp::kAllGatherGemm) {
    // The GEMM pulls the peers' rows with its A loads (gemm_scatter_gather/allgather_fused.cu),
    // after two barriers. Each column tile's CTA loads its A tile over the link: a peer's memory
    // is cached in the peer's L2, not the reader's, so (P - 1) / P of A crosses the link
    // ceil(N / tile_n) times, beside the GEMM: max(G, reloads * the all-gather's bytes).
    const double reloads = static_cast<double>((s.N + tile_n - 1) / tile_n);
    const double c = 2.0 * link.flag_latency_us;
    r.fused_us = c + std::max(r.gemm_us, reloads * link_us);
    r.break_even_overhead = (r.sequential_us - c) / g_base - 1.0;
  } else {
    // Hops after the last wave: the relay (P = 2, 128 x 256 tiles) sends one final per tile
    // whose partial came half a kernel earlier; in one wave, and for the owner algorithm, the
    // partial goes to its owner and the final back: two. The reduce-scatter stops at the owner.
    const bool relay = P == 2 && tile_m * tile_n == 128 * 256;  // kAuto's algorithm on 2 ranks
    int hops = kernel.hops;
    if (hops <= 0) hops = op == FusedOp::kGemmReduceScatter || (relay && waves > 1) ? 1 : 2;
    const double tile_bytes = static_cast<double>(tile_m * tile_n) * s.dtype_bytes;
    const double last_wave_bytes = static_cast<double>(std::min<int64_t>(tiles, link.sms)) * tile_bytes;
    const double hop_us = std::max(us_for_bytes(tile_bytes, link.cta_push_gbps),
                                   link.flag_latency_us + us_for_bytes(f / hops * last_wave_bytes, bw));
    const double tail = hops * hop_us;
    // Communication starts after the first tile and then runs at busbw at best.
    const double lead = t_tile * scale;
    const double c = link.flag_latency_us + link_us;
    r.fused_us = std::max(r.gemm_us + tail, lead + c);
    r.break_even_overhead = std::min((r.sequential_us - tail) / g_base, (r.sequential_us - c) / t_tile) - 1.0;
    if (op == FusedOp::kGemmAllReduce && P > 2 && tile_m * tile_n == 128 * 256) {
      // The relay on P > 2 ranks walks P segments and owns the units of its last one: every final
      // (the all-gather half, (P - 1) / P of C from each rank) leaves in the last 1/P of the
      // kernel. So the kernel takes at least its first P - 1 segments, then those bytes at busbw
      // (docs/gemm_allreduce.md, "The staggered walk"). At P = 2 this never exceeds the bound above.
      const double seg = static_cast<double>(P - 1) / P;
      const double finals = link.flag_latency_us + link_us / 2.0;
      r.fused_us = std::max(r.fused_us, seg * r.gemm_us + finals);
      r.break_even_overhead = std::min(r.break_even_overhead + 1.0, (r.sequential_us - finals) / (seg * g_base)) - 1.0;
    }
  }
  r.exposed_us = r.fused_us - r.gemm_us;
  r.fused_wins = r.fused_us < r.sequential_us;
  return r;
}

std::string predictions_line(FusedOp op, const Shape& s, double t_gemm_us, std::optional<double> overhead,
                             const LinkModel& link) {
  std::string line = std::string("model (") + link.name + "):";
  const char* sep = " ";
  for (int P : {2, 4, 8}) {
    const double ov = overhead ? *overhead : default_overhead(op, s, P);
    const Prediction p = predict(op, s, P, t_gemm_us, ov, link);
    char buf[160];
    std::snprintf(buf, sizeof buf, "%sP=%d fused %.1f us seq %.1f us ov %.2f -> %s", sep, P, p.fused_us,
                  p.sequential_us, ov, prefers_fused(p) ? "fused" : "seq");
    line += buf;
    sep = " | ";
  }
  return line;
}

}  // namespace tw::fused_gemm
