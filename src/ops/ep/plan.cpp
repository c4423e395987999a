// Host checks and sizes of the EP buffer (tilewire/ops/ep.hpp). No GPU needed; unit-tested in
// tests/cpu/ep_plan_test.cpp.
#include <algorithm>
#include <string>

#include "tilewire/ops/ep.hpp"
#include "geometry.hpp"

namespace tw {
namespace {
Status fail(const std::string& why) { return Status{false, "EpBuffer: " + why}; }
}  // namespace

size_t ep_row_bytes(const EpConfig& c) { return (size_t)c.hidden * (c.payload == EpPayload::kBFloat16 ? 2 : 1); }
size_t ep_scale_bytes(const EpConfig& c) { return c.payload == EpPayload::kFp8E4M3 ? (size_t)c.hidden / 128 * 4 : 0; }

// Low latency takes the whole budget: a decode step's few tokens leave little compute beside it,
// and each of its kernels moves rows at the rate of the SMs that issue the stores (at one rank,
// 24 SMs stored 128 x 8 rows of 14 KiB at 0.57 TB/s; docs/ep.md).
int ep_default_sms(const EpConfig& c, int sm_budget) {
  return c.mode == EpMode::kLowLatency ? sm_budget : std::min(kEpDefaultSms, sm_budget);
}

Status check_ep_config(const EpConfig& c, int nranks, int sm_budget) {
  if (nranks < 1) return fail("the communicator has no ranks");
  // The layout kernel (kernels.cu layout_count) keeps a token's destination ranks in a 32-bit mask;
  // nothing past 32 ranks has been run, so it is refused rather than widened untested.
  if (nranks > kEpMaxRanks)
    return fail("the communicator has " + std::to_string(nranks) + " ranks; expert parallelism is built for at most " +
                std::to_string(kEpMaxRanks) + " (a token's destination ranks are a 32-bit mask)");
  if (c.max_tokens_per_rank < 1 || c.max_tokens_per_rank > kEpMaxTokens)
    return fail("max_tokens_per_rank " + std::to_string(c.max_tokens_per_rank) + " is outside [1, " +
                std::to_string(kEpMaxTokens) + "]");
  if (c.hidden < 1) return fail("hidden " + std::to_string(c.hidden) + " must be positive");
  if (c.payload == EpPayload::kFp8E4M3 && c.hidden % 128 != 0)
    return fail("hidden " + std::to_string(c.hidden) + " is not a multiple of 128 (fp8 rows carry a scale per 128 columns)");
  if (ep_row_bytes(c) % 16 != 0)
    return fail("a row of hidden " + std::to_string(c.hidden) + " is " + std::to_string(ep_row_bytes(c)) +
                " bytes, not a multiple of 16 (the kernels move 16-byte vectors; bf16 needs hidden % 8 == 0)");
  if (c.topk < 1 || c.topk > kEpMaxTopk)
    return fail("topk " + std::to_string(c.topk) + " is outside [1, " + std::to_string(kEpMaxTopk) + "]");
  if (c.num_experts < 1 || c.num_experts > kEpMaxExperts)
    return fail("num_experts " + std::to_string(c.num_experts) + " is outside [1, " + std::to_string(kEpMaxExperts) + "]");
  if (c.num_experts % nranks != 0)
    return fail("num_experts " + std::to_string(c.num_experts) + " is not a multiple of the " + std::to_string(nranks) +
                " ranks (each rank holds num_experts / nranks experts)");
  if (c.expert_alignment < 1 || c.expert_alignment > 1024)
    return fail("expert_alignment " + std::to_string(c.expert_alignment) + " is outside [1, 1024]");
  if (c.mode == EpMode::kLowLatency && c.max_tokens_per_rank > kEpMaxLowLatencyTokens)
    return fail("max_tokens_per_rank " + std::to_string(c.max_tokens_per_rank) + " is beyond the low-latency mode's " +
                std::to_string(kEpMaxLowLatencyTokens) + " (decode batches; use the high-throughput mode)");
  if (c.expert_major_rows < 0 || c.expert_major_rows > (1 << 30))
    return fail("expert_major_rows " + std::to_string(c.expert_major_rows) + " is outside [0, 2^30]");
  if (c.expert_major_rows > 0 && (c.mode != EpMode::kHighThroughput || c.payload != EpPayload::kBFloat16))
    return fail("expert_major_rows " + std::to_string(c.expert_major_rows) +
                " needs the high-throughput mode and bf16 rows (set it 0)");
  if (c.combine_slots && c.expert_major_rows == 0)
    return fail("combine_slots needs expert_major_rows > 0 (its rows go back from the places the dispatch "
                "stores into; set it false)");
  if (c.num_sms < 0 || c.num_sms > sm_budget)
    return fail("num_sms " + std::to_string(c.num_sms) + " is outside [0, " + std::to_string(sm_budget) +
                "] (0: the default; at most the communicator's SM budget, comm.sm_count())");
  return Status{};
}


namespace ops::ep {
namespace {
constexpr size_t kAlign = 256;
size_t up(size_t v, size_t a = kAlign) { return (v + a - 1) / a * a; }
}  // namespace

Geometry geometry(const EpConfig& c, int P, int me, int G, bool gin) {
  Geometry g{};
  g.P = P;
  g.me = me;
  g.L = c.num_experts / P;
  g.topk = c.topk;
  g.max_tokens = c.max_tokens_per_rank;
  g.capacity = P * c.max_tokens_per_rank;
  g.G = G;
  g.hidden = c.hidden;
  g.row_bytes = ep_row_bytes(c);
  g.scale_bytes = ep_scale_bytes(c);
  g.E = c.num_experts;
  g.xrows = c.expert_major_rows;
  g.slot_bytes = up(16 + 4 * (size_t)(P + g.L + g.E), 16);
  size_t o = 0;
  auto take = [&](size_t bytes) {
    const size_t at = o;
    o = up(o + bytes);
    return at;
  };
  const size_t flags = (size_t)P * G * 8;
  g.off_slots = take((size_t)P * g.slot_bytes);
  g.off_done = take(flags);
  g.off_cstart = take(flags);
  g.off_cdone = take(flags);
  g.off_dstart = take(flags);
  g.off_sdone = take(flags);
  const size_t cap = (size_t)g.capacity;
  g.off_rsrc = take(cap * 4);
  g.off_rtok = take(cap * 4);
  g.off_ridx = take(cap * c.topk * 4);
  g.off_rw = take(cap * c.topk * 4);
  g.off_rscale = take(cap * g.scale_bytes);
  g.off_rx = take(cap * g.row_bytes);
  g.off_cw = take(cap * 4);
  g.off_cy = take(cap * (size_t)c.hidden * 2);
  g.off_xpos = take(g.xrows > 0 ? cap * c.topk * 4 : 0);
  g.off_xg = take((size_t)g.xrows * g.row_bytes);
  g.off_sy = take(c.combine_slots ? (size_t)c.max_tokens_per_rank * c.topk * c.hidden * 2 : 0);
  g.gin = gin;
  if (gin) {
    g.off_sslots = take((size_t)P * g.slot_bytes);
    g.off_srsrc = take(cap * 4);
    g.off_srtok = take(cap * 4);
    g.off_sridx = take(cap * c.topk * 4);
    g.off_srw = take(cap * c.topk * 4);
    g.off_srscale = take(cap * g.scale_bytes);
    g.off_srx = take(cap * g.row_bytes);
    g.off_scw = take(cap * 4);
    g.off_scy = take(cap * (size_t)c.hidden * 2);
  }
  g.total = o;
  return g;
}

namespace ll {
Geo geometry(const EpConfig& c, int P, int me, int G, bool gin) {
  Geo g{};
  g.P = P, g.me = me, g.L = c.num_experts / P, g.E = c.num_experts, g.topk = c.topk;
  g.max_tokens = c.max_tokens_per_rank, g.cap = P * c.max_tokens_per_rank, g.G = G, g.hidden = c.hidden;
  g.row_bytes = ep_row_bytes(c);
  g.nsc = ep_scale_bytes(c) / 4;
  g.slot_bytes = (16 + 4 * (size_t)g.E + 15) / 16 * 16;
  size_t o = 0;
  auto take = [&](size_t bytes) {
    const size_t at = o;
    o = up(o + bytes);
    return at;
  };
  const size_t rows = (size_t)g.L * g.cap;  // the receive block [L][P x max_tokens]
  g.off_slots = take(2 * (size_t)P * g.slot_bytes);
  g.off_done = take(2 * (size_t)P * G * 8);
  g.off_cdone = take(2 * (size_t)P * G * 8);
  g.off_meta = take(3 * rows * 4);  // source rank, source token, top-k slot
  g.off_scales = take(rows * g.nsc * 4);
  g.off_rows = take(rows * g.row_bytes);
  g.off_y = take(rows * g.hidden * 2);
  g.gin = gin;
  if (gin) {
    const size_t pairs = (size_t)g.max_tokens * g.topk;
    g.off_sslots = take(2 * (size_t)P * g.slot_bytes);
    g.off_smeta = take(3 * 2 * pairs * 4);  // [source, token, slot][two parities][max_tokens x topk]
    g.off_sscales = take(2 * pairs * g.nsc * 4);
    g.off_srows = take(2 * pairs * g.row_bytes);
    g.off_cy = take(pairs * g.hidden * 2);
  }
  g.total = o;
  return g;
}
}  // namespace ll
}  // namespace ops::ep

}  // namespace tw
