// The one table of tilewire environment variables. Add a knob here and nowhere else.
#include "tilewire/runtime/env.hpp"

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "tilewire/runtime/errors.hpp"

namespace tw::env {

static const Var kVars[] = {
    {"TILEWIRE_TIMEOUT_MS", Type::kInt, "300000",
     "Bound on every device wait (ms; CommConfig::timeout_ms overrides). A wait that exceeds it prints "
     "rank/block/what/expected/seen and traps. Minutes: a peer can be late by tens of seconds in a real job, "
     "and the diagnostic should come before torch.distributed's 10-minute timeout."},
    {"TILEWIRE_HOST_TIMEOUT_MS", Type::kInt, "300000",
     "Bound on a virtual team's host collectives (ms): a rank that never arrives ends in kTimeout, not a hang."},
    {"TILEWIRE_ONESHOT_MAX_BYTES", Type::kBytes, "256K",
     "Largest all-reduce (bytes per rank) run one-shot; larger ones run two-shot. Sizes the staging area "
     "(4 x this x LSA ranks, in the control window)."},
    {"TILEWIRE_ONESHOT_BLOCKS", Type::kInt, "64",
     "One-shot all-reduce CTAs, fixed per communicator (1..128; read at communicator creation)."},
    {"TILEWIRE_ONESHOT_THREADS", Type::kInt, "256", "Threads per one-shot CTA (32..512)."},
    {"TILEWIRE_ALLREDUCE_BLOCKS", Type::kInt, "0", "Cap on two-shot CTAs (0: the SM count)."},
    {"TILEWIRE_ALLREDUCE_THREADS", Type::kInt, "512", "Threads per two-shot CTA (multiple of 32, 64..512)."},
    {"TILEWIRE_TWOSHOT_VARIANT", Type::kString, "auto",
     "Two-shot all-reduce data path: load (owner loads peers' shards), push (2 ranks, out-of-place: stores "
     "only), auto (push from 8 MiB where it applies)."},
#ifdef TILEWIRE_BENCH_KERNELS  // "none" leaves C unwritten: measurement builds only
    {"TILEWIRE_GEMM_EPILOGUE", Type::kString, "staged",
     "GEMM epilogue of the bf16 [N,K] kernel, for measurement: staged (shared memory + bulk copies), "
     "staged_half (two 128-column passes), direct (register stores), none (mainloop only; C not written)."},
#endif
    {"TILEWIRE_GEMM_KERNEL", Type::kString, "auto",
     "Kernel of the plain GEMM: auto (CUTLASS's kernels for B [N,K] shapes with M <= 256, rows of whole 128-byte "
     "lines on a grid of >= 1 128x128 tile per SM, or a 128x256 tile grid that leaves SMs idle in its last wave; "
     "the hook kernel otherwise: src/ops/gemm/plan.hpp), hook (tilewire's persistent kernel, the one the fused ops "
     "use), streamk (CUTLASS's stream-K and ping-pong kernels wherever they are built: bf16 and fp16, B [N,K])."},
    {"TILEWIRE_GEMM_STREAMK_PLAN", Type::kString, "",
     "For measurement: override the stream-K kernel's plan, comma-separated key=value: tile=128x256|128x128|128x64|swap128x64|"
     "swap64x16|swap64x32|swap64x64|swap128x64pp|swap128x128pp|128x128pp|128x112pp|"
     "256x160|256x160c2|256x112|256x64n2, "
     "mode=heuristic|dp|splitk|streamk, splits=N, det=0|1, swizzle=1|2|4|8, raster=m|n (empty: the built-in rule)."},
    {"TILEWIRE_RELAY_CONSUMER_ROWS", Type::kInt, "16",
     "Fused GEMM + all-reduce, relay algorithm: rows of each 128-row tile the consumer warps push to the peer "
     "themselves (0..128); the communication warp pushes the rest."},
    {"TILEWIRE_RELAY_COMM_INFLIGHT", Type::kInt, "4",
     "Fused GEMM + all-reduce, relay algorithm: rows each lane of the communication warp keeps in flight "
     "to the peer (8, 4 or 2; any other value means 4)."},
    {"TILEWIRE_RELAY_PACE_PCT", Type::kInt, "60",
     "Fused GEMM + all-reduce, relay algorithm: the communication warp spreads each tile's stores to the peer "
     "over this percentage of the previous tile's period (0..100; 0: as fast as it can). Keeps the CTAs' "
     "pushes from saturating NVLink in bursts."},
    {"TILEWIRE_RELAY_L2_EVICT_FIRST", Type::kBool, "0",
     "Fused GEMM + all-reduce and GEMM + reduce-scatter, relay algorithm: the bulk copies of partial sums and "
     "finals carry the L2 evict-first hint (1), so that they do not push the GEMM's operands out of L2."},
    {"TILEWIRE_RELAY_ROUNDS", Type::kInt, "0",
     "Fused GEMM + all-reduce, relay algorithm: >= 2 walks the tiles in that many rounds of P staggered chunks, "
     "so that the owners' finals (the all-gather half) are spread over the call instead of its last 1/P "
     "(0: the ranks walk P segments; docs/gemm_allreduce.md)."},
    {"TILEWIRE_RELAY_WAVES", Type::kInt, "0",
     "Fused GEMM + all-reduce and GEMM + reduce-scatter, relay algorithm: >= 1 walks the P segments (the "
     "reduce-scatter's shards) interleaved in chunks of at least that many waves of tiles, so that a partial "
     "sum's next hop comes that many waves later instead of a whole segment (0: the segments; it takes "
     "precedence over TILEWIRE_RELAY_ROUNDS; docs/gemm_allreduce.md)."},
    {"TILEWIRE_RELAY_POLL_NS", Type::kInt, "0",
     "Fused GEMM + all-reduce, relay algorithm: nanoseconds the communication warp and the final waits sleep "
     "between polls (0: poll; mbarrier waits suspend in hardware anyway)."},
    {"TILEWIRE_RELAY_PULL", Type::kBool, "0",
     "Fused GEMM + all-reduce, relay algorithm: the first rank stores each partial locally and the owner "
     "bulk-loads it over NVLink (1), instead of the first rank storing it into the owner's staging (0)."},
    {"TILEWIRE_RELAY_BULK_PUSH", Type::kBool, "1",
     "Fused GEMM + all-reduce and GEMM + reduce-scatter, relay algorithm: the communication warp sends "
     "its rows of each tile by bulk copies (TMA) (1) instead of its lanes' 16-byte stores (0)."},
#ifdef TILEWIRE_BENCH_KERNELS  // measurement builds only: knobs that make C wrong on purpose, or need its layouts
    {"TILEWIRE_RELAY_PADDED_SLOTS", Type::kBool, "0",
     "Measurement only: the relay algorithm's staging slots hold the shared-memory rows with their padding (1), "
     "so that a batch of a partial sum's rows goes to the next rank, and the partial sum comes in, as one bulk "
     "copy each instead of one per row (0)."},
    {"TILEWIRE_RELAY_NO_PUSH", Type::kBool, "0",
     "Measurement only: the relay algorithm sets its flags but sends no data (C is wrong); shows what the "
     "NVLink stores cost the GEMM."},
    {"TILEWIRE_AG_PUSH_CTAS", Type::kInt, "0",
     "Measurement only: allgather_gemm's fused push on a virtual team runs this many CTAs (1..16; 0: the "
     "default, 2), taken from the GEMM's SMs; shows how the push's bandwidth sets the call's time."},
    {"TILEWIRE_AG_PUSH", Type::kBool, "0",
     "Measurement only: allgather_gemm's fused path runs the push design (a push kernel beside a GEMM "
     "gated per chunk of rows) instead of the GEMM pulling the shards; both timed in one run."},
    {"TILEWIRE_AG_SWIZZLE", Type::kInt, "0",
     "Measurement only: allgather_gemm's gated GEMM walks bands of this many row units along N (2, 4 or "
     "8; 0: the default, 1: a row block's tiles together); shows what B's reads from HBM cost."},
    {"TILEWIRE_RS_SWIZZLE", Type::kInt, "0",
     "Measurement only: gemm_reducescatter's fused walk along N goes in bands of this many unit rows (1, 2, "
     "4 or 8, where it divides a shard's; 0: the default, the widest of 4, 2, 1 that does); shows what B's "
     "reads from HBM cost the relay."},
    {"TILEWIRE_RS_OWNER", Type::kBool, "0",
     "Measurement only: gemm_reducescatter's fused path runs the owner kernel where it would run the relay "
     "kernel; shows what the relay saves."},
    {"TILEWIRE_OWNER_PLAIN", Type::kBool, "0",
     "Measurement only: the owner algorithm's all-reduce owns tile t on rank t % P instead of spreading the "
     "owners over each CTA group's work; shows the load imbalance the spread removes."},
    {"TILEWIRE_OWNER_FINAL_POLL_ALL", Type::kBool, "0",
     "Measurement only: the owner algorithm's final wait polls the done flags from every consumer thread "
     "without pausing, instead of one warp with pauses; shows what the polling costs the CTAs still working."},
#endif
    {"TILEWIRE_SEQUENTIAL_GEMM", Type::kString, "cublaslt",
     "GEMM of gemm_allreduce's sequential path (the shapes where the fused kernel does not pay): cublaslt "
     "(loaded at run time; tw::gemm when it cannot be) or tilewire (tw::gemm)."},
    {"TILEWIRE_MAX_BLOCKS", Type::kInt, "0",
     "Most CTAs any tilewire kernel launches; sizes the LSA barriers (0: 2 x SM count)."},
    {"TILEWIRE_PDL", Type::kBool, "1",
     "Launch tilewire kernels with programmatic dependent launch (they start while the previous kernel "
     "drains and wait for it on the device)."},
    {"TILEWIRE_EP_LL_TMA", Type::kBool, "1",
     "Low-latency EP: the send stores rows with each CTA's bulk copies where a call fits (all-LSA teams, few "
     "tokens per CTA); 0: always with warps (for measurement). Read when a buffer is made."},
    {"TILEWIRE_EP_LL_EARLY", Type::kBool, "0",
     "Low-latency EP, a team with a GPU per rank: 1: the send and the combine's copying send let the kernel "
     "after them launch once all their CTAs have started (it waits on the device for their end), hiding its "
     "launch; 0: only when they end (the default: at one rank it gained nothing, docs/ep.md). Never on a virtual team. (The one-CTA "
     "combine_release always lets combine_recv launch beside it.) Read when a buffer is made."},
    {"TILEWIRE_GIN", Type::kBool, "1",
     "Request NCCL GIN contexts when some peer lies outside the LSA team (0: never)."},
    {"TILEWIRE_GIN_EMU_SEED", Type::kInt, "1",
     "Virtual nodes (CommConfig::ranks_per_node): the seed of the emulated GIN's choices (which ready put goes "
     "next, each delay)."},
    {"TILEWIRE_GIN_EMU_REORDER", Type::kInt, "8",
     "Emulated GIN: the next put is drawn from the oldest this many ready ones (1: in the order posted)."},
    {"TILEWIRE_GIN_EMU_DELAY_US", Type::kInt, "0",
     "Emulated GIN: each op waits a uniform 0..this many us after it is posted."},
    {"TILEWIRE_GIN_EMU_LATE_SIGNAL_US", Type::kInt, "0",
     "Emulated GIN: a signal becomes visible a uniform 0..this many us after the data it covers landed."},
    {"TILEWIRE_GIN_EMU_SLOW_FLUSH_US", Type::kInt, "0",
     "Emulated GIN: a put's source counts as read (gin_flush) a uniform 0..this many us after it was."},
    {"TILEWIRE_CHECK_CALLS", Type::kBool, "0",
     "Compare every call's record (op, sizes, dtypes, algorithm, buffers' windows and offsets) across ranks in a "
     "host collective before it is enqueued: a call that differs fails on every rank naming the field, instead of "
     "a wrong result or a timeout. For debugging: a host round trip per call. Every rank sets the same value."},
    {"TILEWIRE_DEBUG", Type::kBool, "0", "Print communicator setup (versions, LSA team, windows) to stderr."},
};

std::span<const Var> table() { return kVars; }

const Var* find(const std::string& name) {
  for (const Var& v : kVars)
    if (name == v.name) return &v;
  return nullptr;
}

std::string value_of(const Var& v, bool* from_env) {
  const char* e = std::getenv(v.name);
  if (from_env) *from_env = e != nullptr && *e != 0;
  return (e != nullptr && *e != 0) ? std::string(e) : std::string(v.default_value);
}

std::optional<uint64_t> parse_bytes(const std::string& s) {
  if (s.empty()) return std::nullopt;
  size_t i = 0;
  uint64_t n = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    uint64_t d = s[i] - '0';
    if (n > (UINT64_MAX - d) / 10) return std::nullopt;
    n = n * 10 + d;
    ++i;
  }
  if (i == 0) return std::nullopt;
  std::string suf = s.substr(i);
  for (auto& c : suf) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (!suf.empty() && suf.back() == 'B') suf.pop_back();       // 8KB, 8KiB, 4096B
  if (suf.size() == 2 && suf[1] == 'I') suf.pop_back();       // KiB, MiB (only after a unit)
  int shift = 0;
  if (suf.empty()) shift = 0;
  else if (suf == "K") shift = 10;
  else if (suf == "M") shift = 20;
  else if (suf == "G") shift = 30;
  else if (suf == "T") shift = 40;
  else return std::nullopt;
  if (shift && n > (UINT64_MAX >> shift)) return std::nullopt;
  return n << shift;
}

std::optional<bool> parse_bool(const std::string& s) {
  std::string l;
  for (char c : s) l += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (l == "1" || l == "true" || l == "yes" || l == "on") return true;
  if (l == "0" || l == "false" || l == "no" || l == "off") return false;
  return std::nullopt;
}

std::optional<int64_t> parse_int(const std::string& s) {
  if (s.empty() || !(s[0] == '-' || std::isdigit(static_cast<unsigned char>(s[0])))) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (end == s.c_str() || *end != 0 || errno == ERANGE) return std::nullopt;
  return v;
}

static const Var& lookup(const char* name, Type want) {
  const Var* v = find(name);
  TW_REQUIRE(v != nullptr, kInvalidArgument, std::string("unknown tilewire variable ") + name);
  TW_REQUIRE(v->type == want, kInvalidArgument, std::string(name) + " is not of type " + type_name(want));
  return *v;
}

static std::string malformed(const Var& v, const std::string& val, const char* form) {
  return std::string(v.name) + "='" + val + "' is not a valid " + type_name(v.type) + " (expected " + form + ")";
}

bool get_bool(const char* name) {
  const Var& v = lookup(name, Type::kBool);
  std::string s = value_of(v);
  auto r = parse_bool(s);
  TW_REQUIRE(r.has_value(), kInvalidArgument, malformed(v, s, "0/1/true/false"));
  return *r;
}

int64_t get_int(const char* name) {
  const Var& v = lookup(name, Type::kInt);
  std::string s = value_of(v);
  auto r = parse_int(s);
  TW_REQUIRE(r.has_value(), kInvalidArgument, malformed(v, s, "an integer"));
  return *r;
}

uint64_t get_bytes(const char* name) {
  const Var& v = lookup(name, Type::kBytes);
  std::string s = value_of(v);
  auto r = parse_bytes(s);
  TW_REQUIRE(r.has_value(), kInvalidArgument, malformed(v, s, "a size like 4096, 64K, 8M, 1G"));
  return *r;
}

std::string get_string(const char* name) { return value_of(lookup(name, Type::kString)); }

}  // namespace tw::env
