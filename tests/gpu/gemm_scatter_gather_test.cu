// gemm_reducescatter and allgather_gemm (ops/gemm_scatter_gather.hpp) on the test team (real
// ranks or TILEWIRE_TEST_VIRTUAL), against host references built from the same seeded inputs:
//   * reduce-scatter: every element of every rank's shard; small integers bitwise (the GEMM is
//     exact in fp32, so each rounded partial and the one rounding of their sum are known),
//     random values within one ulp of the fp64 sum plus each partial's rounding and fp32
//     accumulation bound;
//   * all-gather + GEMM: the gathered A bitwise against the shards, C bitwise where the inputs
//     make the GEMM exact, else within the fp32-accumulation bound; the fused path's C also
//     bitwise against the same GEMM kernel on A gathered on the host;
//   * both paths of both ops (sequential and fused, alternating on one workspace, bf16 and fp16),
//   * M not a multiple of P or of 128 (ranks with fewer rows, or none), both B layouts, bf16 and
//     fp16, back-to-back calls with new data on one workspace, one rank late, outputs poisoned,
//     and bad input refused on every rank with nothing written;
//   * M <= 256, where both fused paths run the hook kernel's decode tile (128 x 64, no cluster);
//   * the fused all-gather's shards, many row tiles each, pulled from every rank's window.
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "common.cuh"
#include "ops/gemm/launch.hpp"
#include "ops/gemm/team_gemm.hpp"  // sms_outside_budget: the fused decode GEMM's budget
#include "ops/gemm_allreduce/plan.hpp"  // scatter_uses_relay: which fused kernel runs (its roundings)
#include "tilewire/ops/gemm_scatter_gather.hpp"

namespace {
using tw::BLayout;
using tw::DType;
using namespace tw_test;

struct TpCase {
  int M, N, K;
  DType dtype;
  BLayout b;
  Fill fill;
};

std::string label(const TpCase& c) {
  return std::to_string(c.M) + "x" + std::to_string(c.N) + "x" + std::to_string(c.K) + " " + tw::dtype_name(c.dtype) +
         (c.b == BLayout::kNK ? " NK" : " KN") + (c.fill == Fill::kSmallInt ? " ints" : " random");
}

// Host value of element i of a seeded buffer (the device fill's value, exact in the dtype).
double value(const TpCase& c, uint64_t seed, int rank, size_t i) {
  return (double)input_value(c.fill, seed, rank, i, c.dtype);
}

// B's element (n, k) of rank q in either layout: B_nk[n][k] or B_kn[k][n].
double b_at(const TpCase& c, uint64_t seed, int q, int n, int k, int N, int K) {
  return value(c, seed, q, c.b == BLayout::kNK ? (size_t)n * K + k : (size_t)k * N + n);
}

double round_to(DType t, double v) { return from_bits(t, to_bits(t, (float)v)); }

int sig_bits(DType t) { return mantissa_bits(t) + 1; }

TEST(GemmReduceScatter, ShardsMatchTheReference) {
  TW_SKIP_UNLESS_SM90();
  const int P = team_size();
  const std::vector<TpCase> cases = {
      {1024, 512, 16, DType::kBFloat16, BLayout::kNK, Fill::kSmallInt},  // integers: the bits are known
      {2048, 520, 256, DType::kBFloat16, BLayout::kKN, Fill::kRandom},  // the relay at P = 2, 4, 8: whole 256-row shards
      {1000, 384, 256, DType::kBFloat16, BLayout::kKN, Fill::kRandom},   // M neither P- nor 128-aligned
      {3000, 256, 128, DType::kFloat16, BLayout::kNK, Fill::kRandom},
      {100, 256, 64, DType::kBFloat16, BLayout::kNK, Fill::kSmallInt},   // one tile: rank 0 holds all
      // M <= 256: the fused path's decode tile (128 x 64), a partial last tile column
      {256, 1032, 264, DType::kFloat16, BLayout::kKN, Fill::kRandom},
      {200, 520, 128, DType::kBFloat16, BLayout::kNK, Fill::kSmallInt},
  };
  std::vector<std::string> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    Stream s;
    size_t ws_bytes = 0;
    for (const TpCase& c : cases) ws_bytes = std::max(ws_bytes, tw::gemm_reducescatter_workspace_size(c.M, c.N, c.dtype, P));
    tw::Window ws = comm.alloc_window(ws_bytes);
    for (const TpCase& c : cases) {
      const size_t e = tw::dtype_size(c.dtype);
      const int S = tw::shard_rows(c.M, P), rows = tw::shard_rows_of(c.M, P, me);
      DeviceBuffer A((size_t)c.M * c.K * e), B((size_t)c.N * c.K * e), C(std::max<size_t>((size_t)rows * c.N * e, 16));
      comm.sync(s);
      comm.barrier();  // allocations before any rank's collective (a virtual team shares the device)
      // Back to back on one workspace, new data each call, the paths alternating (the fused path's
      // flags must survive the sequential path's partial written over them).
      const std::vector<tw::TpPath> paths = {tw::TpPath::kSequential, tw::TpPath::kFused, tw::TpPath::kFused,
                                             tw::TpPath::kSequential};
      for (int call = 0; call < (int)paths.size(); ++call) {
        const uint64_t sa = 100 + 10 * call, sb = 200 + 10 * call;
        fill(A.data(), c.dtype, (size_t)c.M * c.K, c.fill, sa, me, s);
        fill(B.data(), c.dtype, (size_t)c.N * c.K, c.fill, sb, me, s);
        poison(C.data(), C.bytes, s);
        // Every rank's fills are done before any rank's collective waits for it: the ranks of a
        // virtual team share the device, and compute-sanitizer orders a copy behind a running kernel.
        comm.sync(s);
        comm.barrier();
        if (call % 2 == 1 && me == P - 1) {  // the last rank late: the others' waits must hold
          comm.sync(s);
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
        tw::GemmReduceScatterArgs a{A.data(), B.data(), C.data(), c.M, c.N, c.K, c.dtype, c.b, ws.data()};
        tw::TpConfig cfg;
        cfg.path = paths[call];
        tw::gemm_reducescatter(comm, a, cfg, s);
        const Bytes got = to_host(C.data(), (size_t)rows * c.N * e, s);
        // Every rank's A rows of this shard and its B, as doubles (the reference's inputs).
        std::vector<std::vector<double>> Aq(P), Bq(P);
        for (int q = 0; q < P; ++q) {
          Aq[q].resize((size_t)rows * c.K), Bq[q].resize((size_t)c.N * c.K);
          for (size_t i = 0; i < Aq[q].size(); ++i) Aq[q][i] = value(c, sa, q, (size_t)me * S * c.K + i);
          for (int n = 0; n < c.N; ++n)
            for (int k = 0; k < c.K; ++k) Bq[q][(size_t)n * c.K + k] = b_at(c, sb, q, n, k, c.N, c.K);
        }
        // The fused path's relay kernel sums a tile down the ring, rank me - 1 first, its owner
        // (me) last, rounding the running sum at each hop (relay_hook.cuh); the sequential path
        // and the owner kernel round each partial once and their sum once.
        const bool chain = paths[call] == tw::TpPath::kFused && P > 1 &&
                           tw::gemm_allreduce_impl::scatter_uses_relay(c.M, P, S, c.dtype);
        size_t bad = 0;
        std::string first;
        std::vector<double> part(P), mag(P);
        for (int i = 0; i < rows; ++i)
          for (int n = 0; n < c.N; ++n) {
            double exact = 0, rounded = 0, bound = 0;
            for (int q = 0; q < P; ++q) {
              part[q] = 0, mag[q] = 0;
              for (int k = 0; k < c.K; ++k) {
                const double v = Aq[q][(size_t)i * c.K + k] * Bq[q][(size_t)n * c.K + k];
                part[q] += v, mag[q] += std::fabs(v);
              }
              exact += part[q];
              rounded += round_to(c.dtype, part[q]);
              // The partial's rounding to the dtype, plus its fp32 accumulation (K terms).
              bound += ulp(part[q], sig_bits(c.dtype)) + c.K * std::ldexp(mag[q], -23);
            }
            if (chain) {  // the ring's order and roundings: each hop's sum rounded once
              double run = round_to(c.dtype, part[(me + P - 1) % P]);
              bound = ulp(part[(me + P - 1) % P], sig_bits(c.dtype));
              for (int h = 2; h <= P; ++h) {
                run = round_to(c.dtype, run + part[(me + P - h) % P]);
                bound += ulp(run, sig_bits(c.dtype));
              }
              for (int q = 0; q < P; ++q) bound += c.K * std::ldexp(mag[q], -23);
              rounded = run;
            }
            const double g = from_bits(c.dtype, elem(got, c.dtype, (size_t)i * c.N + n));
            // Integers: the GEMM's fp32 accumulation is exact, so the op's bits are known: each
            // partial rounded, the sum (exact in fp32) rounded once (the ring: its hops'
            // roundings). Random: within one ulp of the exact sum plus each rounding and the fp32
            // accumulation bound (inputs up to +-32 cancel: a result near 0.01 can carry the fp32
            // error of products near 1000).
            const bool ok = c.fill == Fill::kSmallInt
                                ? g == (chain ? rounded : round_to(c.dtype, rounded))
                                : std::fabs(g - exact) <= ulp(exact, sig_bits(c.dtype)) + bound;
            if (!ok && bad++ == 0)
              first = "row " + std::to_string(me * S + i) + " col " + std::to_string(n) + ": got " + std::to_string(g) +
                      ", exact " + std::to_string(exact) + ", rounded partials " + std::to_string(rounded);
          }
        if (bad)
          wrong[me] += label(c) + " call " + std::to_string(call) + " (" + tw::tp_path_name(paths[call]) + "): " +
                       std::to_string(bad) + " of " +
                       std::to_string((size_t)rows * c.N) + " wrong, first " + first + "; ";
        comm.barrier();
      }
    }
  });
  for (int r = 0; r < P; ++r) EXPECT_EQ(wrong[r], "") << "rank " << r;
}

TEST(AllGatherGemm, GatheredAAndCMatchTheReference) {
  TW_SKIP_UNLESS_SM90();
  const int P = team_size();
  const std::vector<TpCase> cases = {
      {1024, 512, 64, DType::kBFloat16, BLayout::kNK, Fill::kSmallInt},  // exact GEMM: C bitwise
      {1000, 384, 256, DType::kBFloat16, BLayout::kKN, Fill::kRandom},
      {3000, 256, 128, DType::kFloat16, BLayout::kNK, Fill::kSmallInt},
      {100, 512, 64, DType::kFloat16, BLayout::kKN, Fill::kRandom},  // M <= 256: the gated decode tile
      {256, 1032, 128, DType::kBFloat16, BLayout::kNK, Fill::kSmallInt},
      {200, 264, 256, DType::kBFloat16, BLayout::kKN, Fill::kRandom},
      // One column tile and 5 KiB rows; at P > 3 some ranks hold no rows.
      {384, 128, 2560, DType::kBFloat16, BLayout::kNK, Fill::kSmallInt},
  };
  std::vector<std::string> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    Stream s;
    size_t ws_bytes = 0;
    for (const TpCase& c : cases) ws_bytes = std::max(ws_bytes, tw::allgather_gemm_workspace_size(c.M, c.K, c.dtype, P));
    tw::Window ws = comm.alloc_window(ws_bytes);
    for (const TpCase& c : cases) {
      const size_t e = tw::dtype_size(c.dtype);
      const int S = tw::shard_rows(c.M, P), rows = tw::shard_rows_of(c.M, P, me);
      DeviceBuffer A(std::max<size_t>((size_t)rows * c.K * e, 16)), B((size_t)c.N * c.K * e), C((size_t)c.M * c.N * e),
          G((size_t)c.M * c.K * e), Aref((size_t)c.M * c.K * e), Cref((size_t)c.M * c.N * e);
      comm.sync(s);
      comm.barrier();
      // Both paths, alternating on one workspace (the fused path's flags sit where the sequential
      // path pads its shard), new data each call.
      const tw::TpPath paths[] = {tw::TpPath::kSequential, tw::TpPath::kFused, tw::TpPath::kFused,
                                  tw::TpPath::kSequential};
      for (int call = 0; call < 4; ++call) {
        const uint64_t sa = 300 + 10 * call, sb = 400 + 10 * call;
        // Shard r's rows are rows r S.. of one seeded [M, K] matrix (seed sa, "rank" 0), so the
        // gathered A is that matrix.
        fill(A.data(), c.dtype, (size_t)rows * c.K, c.fill, sa, 0, s, (size_t)me * S * c.K);
        fill(B.data(), c.dtype, (size_t)c.N * c.K, c.fill, sb, me, s);
        poison(C.data(), C.bytes, s);
        poison(G.data(), G.bytes, s);
        comm.sync(s);
        comm.barrier();  // as above: no rank's copies behind a peer's waiting kernel
        if (call == 1 && me == 0) {
          comm.sync(s);
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
        tw::AllGatherGemmArgs a{A.data(), B.data(), C.data(), G.data(), c.M, c.N, c.K, c.dtype, c.b, ws.data()};
        tw::TpConfig cfg;
        cfg.path = paths[call];
        tw::allgather_gemm(comm, a, cfg, s);
        const Bytes g = to_host(G.data(), G.bytes, s), got = to_host(C.data(), C.bytes, s);
        if (std::string d = compare_exact(g, host_inputs(c.fill, c.dtype, (size_t)c.M * c.K, sa, 0), c.dtype,
                                          (size_t)c.M * c.K);
            !d.empty())
          wrong[me] += label(c) + " call " + std::to_string(call) + " (" + tw::tp_path_name(paths[call]) + "): gathered A: " + d + "; ";
        if (paths[call] == tw::TpPath::kFused) {
          // The fused path's GEMM is the hook kernel reading every shard where it lies, or at
          // M <= 256 the plain GEMM on the rank's SM budget after the gather: bitwise the same
          // kernel on A gathered on the host (the batches change where rows are read, not the math).
          upload(Aref.data(), host_inputs(c.fill, c.dtype, (size_t)c.M * c.K, sa, 0), s);
          poison(Cref.data(), Cref.bytes, s);
          const tw::GemmArgs ref_args{Aref.data(), B.data(), Cref.data(), c.M, c.N, c.K, c.dtype, c.b};
          if (tw::gemm_impl::gated_tile_is_decode(c.M)) {
            tw::GemmConfig rc;
            rc.reserved_sms = tw::gemm_impl::sms_outside_budget(comm);
            tw::gemm(ref_args, rc, s);
          } else {
            tw::gemm_impl::gemm_gated(ref_args, tw::GemmConfig{}, tw::gemm_impl::Gate{}, s);
          }
          if (std::string d = compare_exact(got, to_host(Cref.data(), Cref.bytes, s), c.dtype, (size_t)c.M * c.N);
              !d.empty())
            wrong[me] += label(c) + " call " + std::to_string(call) + " (fused): C vs the same GEMM on the host-gathered A: " + d + "; ";
        }
        std::vector<double> Ah((size_t)c.M * c.K), Bh((size_t)c.N * c.K);
        for (size_t i = 0; i < Ah.size(); ++i) Ah[i] = value(c, sa, 0, i);
        for (int n = 0; n < c.N; ++n)
          for (int k = 0; k < c.K; ++k) Bh[(size_t)n * c.K + k] = b_at(c, sb, me, n, k, c.N, c.K);
        size_t bad = 0;
        std::string first;
        for (int m = 0; m < c.M; ++m)
          for (int n = 0; n < c.N; ++n) {
            double exact = 0, mag = 0;
            for (int k = 0; k < c.K; ++k) {
              const double p = Ah[(size_t)m * c.K + k] * Bh[(size_t)n * c.K + k];
              exact += p, mag += std::fabs(p);
            }
            const double v = from_bits(c.dtype, elem(got, c.dtype, (size_t)m * c.N + n));
            // Integers: fp32 accumulation is exact, one rounding: bitwise. Random: + K fp32 ulps.
            const bool ok = c.fill == Fill::kSmallInt ? v == round_to(c.dtype, exact)
                                                      : std::fabs(v - exact) <= ulp(exact, sig_bits(c.dtype)) +
                                                                                     c.K * std::ldexp(mag, -23);
            if (!ok && bad++ == 0)
              first = "row " + std::to_string(m) + " col " + std::to_string(n) + ": got " + std::to_string(v) +
                      ", exact " + std::to_string(exact);
          }
        if (bad)
          wrong[me] += label(c) + " call " + std::to_string(call) + " (" + tw::tp_path_name(paths[call]) + "): C " + std::to_string(bad) + " wrong, first " +
                       first + "; ";
        comm.barrier();
      }
    }
  });
  for (int r = 0; r < P; ++r) EXPECT_EQ(wrong[r], "") << "rank " << r;
}

// A sequential call right after a pulled one on one workspace, with a shape whose short last shard
// is padded where the pulled call kept that rank's rows (S2 = S1 - 128 puts the pad inside the last
// rank's old shard), while rank 0, its GEMM on 2 SMs, may still be loading them (it walks its own
// rows first, the last shard last). The pulled call's C on every rank bitwise against the same
// kernel on the host-gathered A; the sequential call's gathered A bitwise.
TEST(AllGatherGemm, SequentialCallAfterAPulledOneLeavesItsRows) {
  TW_SKIP_UNLESS_SM90();
  const int P = team_size();
  if (P < 2 || P > 8) GTEST_SKIP() << "2 to 8 ranks (the pad must fall inside the last shard)";
  const int S1 = 1024, S2 = S1 - 128;
  const TpCase big{P * S1, 1024, 1024, DType::kBFloat16, BLayout::kNK, Fill::kRandom};
  const TpCase small{P * S2 - 24, 1024, 1024, DType::kBFloat16, BLayout::kNK, Fill::kRandom};
  ASSERT_EQ(tw::shard_rows(big.M, P), S1);
  ASSERT_EQ(tw::shard_rows(small.M, P), S2);
  ASSERT_LT(tw::shard_rows_of(small.M, P, P - 1), S2);  // padded
  std::vector<std::string> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    const size_t e = 2;
    Stream s;
    tw::Window ws = comm.alloc_window(std::max(tw::allgather_gemm_workspace_size(big.M, big.K, big.dtype, P),
                                               tw::allgather_gemm_workspace_size(small.M, small.K, small.dtype, P)));
    const int rows1 = tw::shard_rows_of(big.M, P, me), rows2 = tw::shard_rows_of(small.M, P, me);
    DeviceBuffer A1((size_t)rows1 * big.K * e), A2(std::max<size_t>((size_t)rows2 * small.K * e, 16)),
        B((size_t)big.N * big.K * e), C1((size_t)big.M * big.N * e), C2((size_t)small.M * small.N * e),
        G2((size_t)small.M * small.K * e), Aref((size_t)big.M * big.K * e), Cref((size_t)big.M * big.N * e);
    for (int round = 0; round < 3; ++round) {
      const uint64_t sa1 = 900 + 10 * round, sa2 = 901 + 10 * round, sb = 902 + 10 * round;
      fill(A1.data(), big.dtype, (size_t)rows1 * big.K, big.fill, sa1, 0, s, (size_t)me * S1 * big.K);
      fill(A2.data(), small.dtype, (size_t)rows2 * small.K, small.fill, sa2, 0, s, (size_t)me * S2 * small.K);
      fill(B.data(), big.dtype, (size_t)big.N * big.K, big.fill, sb, me, s);
      poison(C1.data(), C1.bytes, s);
      poison(C2.data(), C2.bytes, s);
      poison(G2.data(), G2.bytes, s);
      comm.sync(s);
      comm.barrier();
      tw::TpConfig pulled;
      pulled.path = tw::TpPath::kFused;
      if (me == 0) pulled.reserved_sms = comm.sm_count() - 2;  // the slow reader
      tw::allgather_gemm(comm, tw::AllGatherGemmArgs{A1.data(), B.data(), C1.data(), nullptr, big.M, big.N, big.K,
                                                     big.dtype, big.b, ws.data()},
                         pulled, s);
      tw::TpConfig seq;  // enqueued at once: nothing on the host between the calls
      seq.path = tw::TpPath::kSequential;
      tw::allgather_gemm(comm, tw::AllGatherGemmArgs{A2.data(), B.data(), C2.data(), G2.data(), small.M, small.N,
                                                     small.K, small.dtype, small.b, ws.data()},
                         seq, s);
      upload(Aref.data(), host_inputs(big.fill, big.dtype, (size_t)big.M * big.K, sa1, 0), s);
      poison(Cref.data(), Cref.bytes, s);
      tw::gemm_impl::gemm_gated(tw::GemmArgs{Aref.data(), B.data(), Cref.data(), big.M, big.N, big.K, big.dtype, big.b},
                                tw::GemmConfig{}, tw::gemm_impl::Gate{}, s);
      if (std::string d = compare_exact(to_host(C1.data(), C1.bytes, s), to_host(Cref.data(), Cref.bytes, s),
                                        big.dtype, (size_t)big.M * big.N);
          !d.empty())
        wrong[me] += "round " + std::to_string(round) + ": the pulled call's C: " + d + "; ";
      if (std::string d = compare_exact(to_host(G2.data(), G2.bytes, s),
                                        host_inputs(small.fill, small.dtype, (size_t)small.M * small.K, sa2, 0),
                                        small.dtype, (size_t)small.M * small.K);
          !d.empty())
        wrong[me] += "round " + std::to_string(round) + ": the sequential call's gathered A: " + d + "; ";
      comm.sync(s);
      comm.barrier();
    }
  });
  for (int r = 0; r < P; ++r) EXPECT_EQ(wrong[r], "") << "rank " << r;
}

// Bad input: refused on every rank with the reason, nothing written (outputs stay poisoned).
// Shards of many row tiles pulled from every rank's window (16 per rank, a cluster pair each),
// a rank late on every other call (the entry and ready barriers hold the others), new data each
// call. The gathered A bitwise against the shards, C bitwise against the same kernel on A
// gathered on the host (the batches change where a tile's rows are read, not its math); the
// GEMM's exactness is the test above's.
TEST(AllGatherGemm, PulledShardsMatchTheSameKernel) {
  TW_SKIP_UNLESS_SM90();
  const int P = team_size();
  const TpCase c{2048 * P, 256, 512, DType::kBFloat16, BLayout::kNK, Fill::kRandom};
  std::vector<std::string> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank(), S = tw::shard_rows(c.M, P), rows = tw::shard_rows_of(c.M, P, me);
    const size_t e = tw::dtype_size(c.dtype);
    Stream s;
    tw::Window ws = comm.alloc_window(tw::allgather_gemm_workspace_size(c.M, c.K, c.dtype, P));
    DeviceBuffer A((size_t)rows * c.K * e), B((size_t)c.N * c.K * e), C((size_t)c.M * c.N * e),
        G((size_t)c.M * c.K * e), Aref((size_t)c.M * c.K * e), Cref((size_t)c.M * c.N * e);
    for (int call = 0; call < 4; ++call) {
      const uint64_t sa = 700 + 10 * call, sb = 800 + 10 * call;
      fill(A.data(), c.dtype, (size_t)rows * c.K, c.fill, sa, 0, s, (size_t)me * S * c.K);
      fill(B.data(), c.dtype, (size_t)c.N * c.K, c.fill, sb, me, s);
      poison(C.data(), C.bytes, s);
      poison(G.data(), G.bytes, s);
      comm.sync(s);
      comm.barrier();
      if (call % 2 == 1 && me == call / 2 % P) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      tw::TpConfig cfg;
      cfg.path = tw::TpPath::kFused;
      tw::allgather_gemm(comm, tw::AllGatherGemmArgs{A.data(), B.data(), C.data(), G.data(), c.M, c.N, c.K, c.dtype,
                                                     c.b, ws.data()},
                         cfg, s);
      const Bytes host_a = host_inputs(c.fill, c.dtype, (size_t)c.M * c.K, sa, 0);
      if (std::string d = compare_exact(to_host(G.data(), G.bytes, s), host_a, c.dtype, (size_t)c.M * c.K); !d.empty())
        wrong[me] += "call " + std::to_string(call) + ": gathered A: " + d + "; ";
      upload(Aref.data(), host_a, s);
      poison(Cref.data(), Cref.bytes, s);
      tw::gemm_impl::gemm_gated(tw::GemmArgs{Aref.data(), B.data(), Cref.data(), c.M, c.N, c.K, c.dtype, c.b},
                                tw::GemmConfig{}, tw::gemm_impl::Gate{}, s);
      if (std::string d = compare_exact(to_host(C.data(), C.bytes, s), to_host(Cref.data(), Cref.bytes, s), c.dtype,
                                        (size_t)c.M * c.N);
          !d.empty())
        wrong[me] += "call " + std::to_string(call) + ": C vs the same kernel on the host-gathered A: " + d + "; ";
      comm.sync(s);
      comm.barrier();
    }
  });
  for (int r = 0; r < P; ++r) EXPECT_EQ(wrong[r], "") << "rank " << r;
}

TEST(GemmScatterGather, BadInputWritesNothing) {
  TW_SKIP_UNLESS_SM90();
  const int P = team_size();
  std::vector<std::string> wrong(P);
  run_team([&](tw::Comm& comm) {
    const int me = comm.rank();
    Stream s;
    const int M = 512, N = 256, K = 128;
    tw::Window ws = comm.alloc_window(tw::gemm_reducescatter_workspace_size(M, N, DType::kBFloat16, P) +
                                      tw::allgather_gemm_workspace_size(M, K, DType::kBFloat16, P));
    DeviceBuffer A((size_t)M * K * 2), B((size_t)N * K * 2), C((size_t)M * N * 2), small(4096);
    poison(C.data(), C.bytes, s);
    const auto expect = [&](const char* what, const std::function<void()>& f, tw::Errc code,
                            std::vector<const char*> needles) {
      if (const ::testing::AssertionResult r = throws_tw(f, code, needles); !r) wrong[me] += std::string(what) + ": " + r.message() + "; ";
    };
    tw::GemmReduceScatterArgs rs{A.data(), B.data(), C.data(), M, N, K, DType::kBFloat16, BLayout::kNK, ws.data()};
    tw::GemmReduceScatterArgs r2 = rs;
    r2.dtype = DType::kFloat32;
    expect("rs dtype", [&] { tw::gemm_reducescatter(comm, r2, {}, s); }, tw::Errc::kInvalidArgument, {"float"});
    r2 = rs, r2.workspace = small.data();  // not in a window
    expect("rs workspace", [&] { tw::gemm_reducescatter(comm, r2, {}, s); }, tw::Errc::kInvalidArgument, {"workspace"});
    tw::TpConfig fused;
    fused.path = tw::TpPath::kFused;
    r2 = rs, r2.b_layout = BLayout::kKN, r2.K_local = 100;  // B [K, N]: fine; A's 200-byte rows are not 16-byte multiples
    expect("rs fused K", [&] { tw::gemm_reducescatter(comm, r2, fused, s); }, tw::Errc::kInvalidArgument, {"gemm_reducescatter"});
    tw::AllGatherGemmArgs ag{A.data(), B.data(), C.data(), nullptr, M, N, K, DType::kBFloat16, BLayout::kNK, ws.data()};
    tw::TpConfig starved = fused;
    starved.reserved_sms = comm.sm_count();  // no SM left for the GEMM
    expect("ag fused SMs", [&] { tw::allgather_gemm(comm, ag, starved, s); }, tw::Errc::kInvalidArgument,
           {"allgather_gemm", "reserved"});
    tw::AllGatherGemmArgs a2 = ag;
    a2.C = static_cast<char*>(ws.data()) + 256;
    expect("ag C in workspace", [&] { tw::allgather_gemm(comm, a2, {}, s); }, tw::Errc::kInvalidArgument, {"overlaps"});
    a2 = ag, a2.K = 100;  // 200-byte rows: not 16-byte multiples
    expect("ag K", [&] { tw::allgather_gemm(comm, a2, {}, s); }, tw::Errc::kInvalidArgument, {"allgather_gemm"});
    const Bytes c = to_host(C.data(), C.bytes, s);
    if (std::string d = check_fill(c, 0, c.size(), kPoison, "C"); !d.empty()) wrong[me] += d;
    comm.barrier();
  });
  for (int r = 0; r < P; ++r) EXPECT_EQ(wrong[r], "") << "rank " << r;
}

}  // namespace
