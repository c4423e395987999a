// tools/bench_ep.cu — `tilewire bench ep`: MoE dispatch and combine (tilewire/ops/ep.hpp) against
// NCCL's all-to-all-v pipeline, in the same run.
//
// One process, one thread per local GPU (Comm::run_local), or --virtual P ranks on GPU 0 (no NCCL
// rows; times are P ranks sharing one GPU: correctness only). Per rank, inputs are seeded:
//   x[t][c]        bf16 of a seeded value of (rank, t, c) (fp8 high-throughput: bytes of it)
//   topk_idx[t]    top-k distinct experts, uniform or skewed (e = E u^3) over all experts
//   weights[t][j]  seeded in [0.5, 1)
// and the combine input of each received row is y = g(source rank, source token, c), a seeded
// bf16 value, so that the source can check its output without the peers' data:
//   high throughput  out[t][c] = bf16(n_t x g(me, t, c)), n_t = ranks token t went to
//   low latency      out[t][c] = bf16(sum_j w[t][j] g(me, t, c)), fp32 fma over the valid j in order
// Received rows are checked on the device against the seeded x of their (source rank, token), the
// counts against the layouts of every rank (host all-gather). #wrong counts every mismatch.
//
// Timing: R repeats x {gate; ev0; iters x op; ev1} per op (bench_gate.hpp: all GPUs start every
// repeat together); per iteration (ev1 - ev0) / iters; median and p99 over repeats and the max
// over ranks. Bandwidth two ways (header): logical = rows received including this rank's own x
// payload bytes (DeepEP's convention), wire = rows from other ranks x the bytes that cross NVLink
// (payload, scales, ids, weights, source), over the NVLink ceiling measured in the same run (a
// kernel storing 256 MiB into the next rank's window from every SM).
//
// Low latency: the dispatch row times dispatch_send + dispatch_recv; the combine row times a whole
// step (both halves of each) minus the dispatch row's median (a combine needs a fresh receive).
// A third combine row times combine_send + combine_recv alone, with an event before and after
// each (the pair rule charges combine with any change in the dispatch's time after a combine;
// the events end programmatic launch's overlap at both ends: about a launch too high).
//
// NCCL baseline (real GPUs): the same layout kernels, per-rank counts to the host (a sync), an
// ncclAllGather of the count matrix and a sync, a permute kernel packing rows per destination,
// grouped ncclSend/ncclRecv; combine: grouped send/recv back and an unpermute kernel summing each
// token's rows in rank order. Checked bitwise against tilewire's result.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "bench_gate.hpp"
#include "commands.hpp"
#include "ep_timeline.hpp"
#include "tilewire/device/peer.cuh"
#include "tilewire/device/ptx.cuh"
#include "tilewire/ops/ep.hpp"
#include "tilewire/runtime/comm.hpp"
#include "tilewire/runtime/env.hpp"
#include "tilewire/runtime/errors.hpp"
#include "tilewire/trace/trace.hpp"

namespace tw::cli {
namespace {

struct EpOptions {
  EpMode mode = EpMode::kHighThroughput;
  int tokens = 4096, hidden = 7168, topk = 8, experts = 256, sms = 0, iters = 10, repeats = 7;
  bool skewed = false;
  EpPayload payload = EpPayload::kBFloat16;
  int virtual_ranks = 0;
  int ranks_per_node = 0;  // --ranks-per-node: virtual nodes (peers of other nodes through the emulated GIN)
  std::string json_path;
  std::string trace_path;
  bool combine_probes = false;  // --combine-probes
  bool help = false;
};

const char* kUsage =
    "usage: tilewire bench ep [options]\n"
    "  --mode ht|ll          high throughput (default) or low latency\n"
    "  -t/--tokens N         tokens per rank (default 4096; ll: <= 1024)\n"
    "  -H/--hidden H         hidden size (default 7168)\n"
    "  -k/--topk K           experts per token (default 8)\n"
    "  -e/--experts E        experts in all (default 256)\n"
    "  --routing uniform|skewed\n"
    "  --payload bf16|fp8    (ll: fp8 is quantized by the send)\n"
    "  --sms N               CTAs per kernel (default: ht min(24, the SM budget), ll the SM budget)\n"
    "  -n/--iters N, -R/--repeats R\n"
    "  --virtual P           P virtual ranks on GPU 0 (correctness only; no NCCL rows)\n"
    "  --ranks-per-node L    with --virtual: P / L virtual nodes of L ranks, other nodes reached\n"
    "                        through the emulated GIN (CommConfig::ranks_per_node)\n"
    "  --json FILE           every row and the metadata as JSON\n"
    "  --trace FILE          one dispatch + combine traced (per CTA: start, first row out, each\n"
    "                        source's rows landed, end), clocks aligned: Perfetto JSON\n"
    "  --combine-probes      ll: the combine timed by events twice more, after each dispatch\n"
    "                        (a) the L2 flushed (256 MiB written) and (b) a 50 us idle kernel: what\n"
    "                        the combine's time owes to the state the dispatch leaves behind\n";

EpOptions parse(const std::vector<std::string>& a) {
  EpOptions o;
  auto need = [&](size_t& i) -> const std::string& {
    TW_REQUIRE(i + 1 < a.size(), kInvalidArgument, "bench ep: " + a[i] + " needs a value");
    return a[++i];
  };
  auto num = [&](const std::string& name, const std::string& v) {
    char* end = nullptr;
    const long x = std::strtol(v.c_str(), &end, 10);
    TW_REQUIRE(end && *end == 0 && x > 0 && x < (1 << 30), kInvalidArgument, "bench ep: " + name + " '" + v + "' is not a positive integer");
    return (int)x;
  };
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string& k = a[i];
    if (k == "-h" || k == "--help") o.help = true;
    else if (k == "--mode") {
      const std::string& v = need(i);
      const std::optional<EpMode> m = parse_ep_mode(v);
      TW_REQUIRE(m.has_value(), kInvalidArgument, "bench ep: --mode is ht or ll, not '" + v + "'");
      o.mode = *m;
    } else if (k == "-t" || k == "--tokens") o.tokens = num(k, need(i));
    else if (k == "-H" || k == "--hidden") o.hidden = num(k, need(i));
    else if (k == "-k" || k == "--topk") o.topk = num(k, need(i));
    else if (k == "-e" || k == "--experts") o.experts = num(k, need(i));
    else if (k == "--sms") o.sms = num(k, need(i));
    else if (k == "-n" || k == "--iters") o.iters = num(k, need(i));
    else if (k == "-R" || k == "--repeats") o.repeats = num(k, need(i));
    else if (k == "--routing") {
      const std::string& v = need(i);
      TW_REQUIRE(v == "uniform" || v == "skewed", kInvalidArgument, "bench ep: --routing is uniform or skewed");
      o.skewed = v == "skewed";
    } else if (k == "--payload") {
      const std::string& v = need(i);
      const std::optional<EpPayload> p = parse_ep_payload(v);
      TW_REQUIRE(p.has_value(), kInvalidArgument, "bench ep: --payload is bf16 or fp8, not '" + v + "'");
      o.payload = *p;
    } else if (k == "--virtual") o.virtual_ranks = parse_virtual_ranks(k, need(i));
    else if (k == "--ranks-per-node") {
      const std::string v = need(i);
      const std::optional<int64_t> l = env::parse_int(v);
      TW_REQUIRE(l.has_value() && *l >= 1 && *l <= 32, kInvalidArgument,
                 "bench ep: --ranks-per-node takes 1..32 ranks per virtual node, got '" + v + "'");
      o.ranks_per_node = (int)*l;
    }
    else if (k == "--json") o.json_path = need(i);
    else if (k == "--trace") o.trace_path = need(i);
    else if (k == "--combine-probes") o.combine_probes = true;
    else TW_REQUIRE(false, kInvalidArgument, "bench ep: unknown option '" + k + "' (tilewire bench ep --help)");
  }
  return o;
}

// ------------------------------------------------------------------ seeded values (device)
__host__ __device__ inline uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// A bf16 value of (salt, rank, t, c) in [-2, 2) with 8 significant bits: exact in bf16.
__host__ __device__ inline float val(uint64_t salt, int rank, int t, int c) {
  const uint64_t h = mix(salt ^ ((uint64_t)rank << 48) ^ ((uint64_t)t << 20) ^ (uint64_t)c);
  return ((float)(int)(h % 512) - 256.0f) / 128.0f;
}

__global__ void fill_x(__nv_bfloat16* x, int N, int H, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)N * H; i += (size_t)gridDim.x * blockDim.x)
    x[i] = __float2bfloat16_rn(val(1, rank, (int)(i / H), (int)(i % H)));
}
// High-throughput fp8 payload: opaque bytes of (rank, t, c), scales of (rank, t, group).
__global__ void fill_fp8(uint8_t* x, float* sc, int N, int H, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)N * H; i += (size_t)gridDim.x * blockDim.x) {
    x[i] = (uint8_t)mix(7 ^ ((uint64_t)rank << 48) ^ i);
    if (i % 128 == 0) sc[i / 128] = 1.0f + (float)(mix(9 ^ i ^ ((uint64_t)rank << 50)) % 64) / 64.0f;
  }
}

// A received row of the high-throughput mode against its source's seeded x; y = g(source).
__global__ void check_ht_rows(const void* rx, const float* rsc, const int32_t* src, const int32_t* tok, const int* n,
                              int H, bool fp8, __nv_bfloat16* y, unsigned long long* wrong) {
  unsigned long long bad = 0;
  const int rows = *n;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)rows * H; i += (size_t)gridDim.x * blockDim.x) {
    const int r = (int)(i / H), c = (int)(i % H), s = src[r], t = tok[r];
    if (fp8) {
      bad += static_cast<const uint8_t*>(rx)[i] != (uint8_t)mix(7 ^ ((uint64_t)s << 48) ^ ((size_t)t * H + c));
      if (c % 128 == 0)
        bad += rsc[(size_t)r * (H / 128) + c / 128] != 1.0f + (float)(mix(9 ^ (((size_t)t * H + c)) ^ ((uint64_t)s << 50)) % 64) / 64.0f;
    } else {
      bad += __bfloat162float(static_cast<const __nv_bfloat16*>(rx)[i]) != val(1, s, t, c);
    }
    y[i] = __float2bfloat16_rn(val(2, s, t, c));
  }
  if (bad) atomicAdd(wrong, bad);
}

// out[t][c] == bf16(n_t g(me, t, c)) (n_t copies summed in fp32: exact for n_t <= 8).
__global__ void check_ht_out(const __nv_bfloat16* out, const uint8_t* in_rank, int N, int H, int P, int me,
                             unsigned long long* wrong) {
  unsigned long long bad = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)N * H; i += (size_t)gridDim.x * blockDim.x) {
    const int t = (int)(i / H), c = (int)(i % H);
    int n = 0;
    for (int d = 0; d < P; ++d) n += in_rank[(size_t)t * P + d];
    float acc = 0.0f;
    for (int k = 0; k < n; ++k) acc += val(2, me, t, c);
    const __nv_bfloat16 want = __float2bfloat16_rn(acc);
    bad += *reinterpret_cast<const uint16_t*>(&out[i]) != *reinterpret_cast<const uint16_t*>(&want);
  }
  if (bad) atomicAdd(wrong, bad);
}

// Low latency: expert l's rows against the quantized or plain x of their source; y = g(source).
__global__ void check_ll_rows(const void* rx, const float* rsc, const int32_t* src, const int32_t* tok, const int* count,
                              int L, int cap, int H, bool fp8, __nv_bfloat16* y, unsigned long long* wrong) {
  unsigned long long bad = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)L * cap * (H / 128); i += (size_t)gridDim.x * blockDim.x) {
    const size_t row = i / (H / 128);
    const int l = (int)(row / cap), r = (int)(row % cap), grp = (int)(i % (H / 128));
    if (r >= count[l]) continue;
    const int s = src[row], t = tok[row];
    float amax = 0.0f;
    for (int k = 0; k < 128; ++k) amax = fmaxf(amax, fabsf(val(1, s, t, grp * 128 + k)));
    const float scale = amax > 0.0f ? amax / 448.0f : 1.0f, inv = amax > 0.0f ? fminf(448.0f / amax, FLT_MAX) : 1.0f;
    if (fp8) bad += rsc[row * (H / 128) + grp] != scale;
    for (int k = 0; k < 128; ++k) {
      const int c = grp * 128 + k;
      const float v = val(1, s, t, c);
      if (fp8) {
        const uint8_t q = (uint8_t)__nv_cvt_float_to_fp8(__fmul_rn(v, inv), __NV_SATFINITE, __NV_E4M3);  // the send's q = e4m3(x x 448 / amax)
        bad += static_cast<const uint8_t*>(rx)[row * H + c] != q;
      } else {
        bad += __bfloat162float(static_cast<const __nv_bfloat16*>(rx)[row * H + c]) != v;
      }
      y[row * H + c] = __float2bfloat16_rn(val(2, s, t, c));
    }
  }
  if (bad) atomicAdd(wrong, bad);
}

template <class Idx>
__global__ void check_ll_out(const __nv_bfloat16* out, const Idx* idx, const float* w, int N, int H, int topk, int me,
                             unsigned long long* wrong) {
  unsigned long long bad = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)N * H; i += (size_t)gridDim.x * blockDim.x) {
    const int t = (int)(i / H), c = (int)(i % H);
    float acc = 0.0f;
    for (int j = 0; j < topk; ++j)
      if (idx[(size_t)t * topk + j] >= 0) acc = __fmaf_rn(w[(size_t)t * topk + j], val(2, me, t, c), acc);
    const __nv_bfloat16 want = __float2bfloat16_rn(acc);
    bad += *reinterpret_cast<const uint16_t*>(&out[i]) != *reinterpret_cast<const uint16_t*>(&want);
  }
  if (bad) atomicAdd(wrong, bad);
}

// The ceiling: every SM stores `bytes` into the next rank's window.
__global__ void store_to_peer(DevCtx ctx, DevWindow w, size_t bytes) {
  uint4* dst = dev::lsa_ptr<uint4>(ctx, w, 0, (ctx.lsa_rank + 1) % ctx.lsa_size);
  const uint4 v = make_uint4(1, 2, 3, 4);
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < bytes / 16; i += (size_t)gridDim.x * blockDim.x) dst[i] = v;
}

std::vector<int64_t> make_routing(const EpOptions& o, int rank) {
  std::vector<int64_t> idx((size_t)o.tokens * o.topk, -1);
  for (int t = 0; t < o.tokens; ++t) {
    int j = 0;
    for (int tries = 0; j < o.topk && tries < 16 * o.topk; ++tries) {
      const uint64_t u = mix(11 ^ ((uint64_t)rank << 40) ^ ((uint64_t)t << 8) ^ (uint64_t)tries);
      const double f = (double)(u % 1000003) / 1000003.0;
      const int64_t e = o.skewed ? std::min<int64_t>(o.experts - 1, (int64_t)(o.experts * f * f * f)) : (int64_t)(u % o.experts);
      bool dup = false;
      for (int q = 0; q < j; ++q) dup |= idx[(size_t)t * o.topk + q] == e;
      if (!dup) idx[(size_t)t * o.topk + j++] = e;
    }
  }
  return idx;
}

struct Row {
  std::string what;
  double med_us = 0, p99_us = 0, max_us = 0;
  double logical_gbps = 0, wire_gbps = 0;
  double per_token_us = 0, per_pair_us = 0;  // median over this rank's tokens / (token, expert) selections
  double floor_us = 0;                        // one real rank: the HBM floor of the op's bytes (0: n/a)
  unsigned long long wrong = 0;
  bool ran = false;
};

struct Shared {
  std::mutex mu;
  std::vector<std::vector<double>> times;  // [rank][repeat] of the op being timed
  std::vector<Row> rows;
  double ceiling_gbps = 0;
  double hbm_gbps = 0;  // one real rank: HBM copy bandwidth (read + write), measured in the run
  unsigned long long wrong = 0;
  int sms = 0;  // CTAs of each EP kernel
  std::string timeline;  // --trace: the traced call's phases (ep_timeline.hpp)
};

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, (size_t)std::ceil(p * (v.size() - 1)))];
}

}  // namespace

int bench_ep(const std::vector<std::string>& argv);

}  // namespace tw::cli

#include "bench_ep_run.cuh"
