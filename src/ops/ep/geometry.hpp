// src/ops/ep/geometry.hpp — where everything lies in an EP buffer's window, the same offsets on
// every rank (host and device; unit-tested on the CPU: tests/cpu/ep_plan_test.cpp). Regions are
// 256-byte aligned and disjoint; kernels.cuh says who writes what where.
#pragma once
#include <cstddef>
#include <cstdint>

#include "tilewire/ops/ep.hpp"

#if defined(__CUDACC__)
#define TW_EP_HD __host__ __device__
#else
#define TW_EP_HD
#endif

namespace tw::ops::ep {

// High throughput.
struct Geometry {
  int P, me, L, E, topk, max_tokens, capacity, G, hidden;
  int xrows;                      // EpConfig::expert_major_rows (0: no expert-major area)
  size_t row_bytes, scale_bytes;  // per row
  size_t slot_bytes;              // one count slot
  size_t off_slots, off_done, off_cstart, off_cdone;
  size_t off_dstart;  // [P][G] flags: the source's dispatch CTA has started (EpExpertMajor)
  size_t off_rx, off_rscale, off_ridx, off_rw, off_rsrc, off_rtok;
  size_t off_cy, off_cw;
  size_t off_xpos, off_xg;  // [capacity x topk] places, [xrows] rows (EpExpertPlaces; 0 bytes without)
  size_t off_sdone;         // [P][G] flags: the source's stores into this rank's slot rows are done
  size_t off_sy;            // [max_tokens x topk] bf16 rows (EpConfig::combine_slots; 0 bytes without)
  // GIN (gin true: some peer is outside the LSA team). A GIN put reads a window, so what goes to
  // a GIN peer is first stored here, laid out as the receiver's regions but indexed
  // [destination][slot] (dispatch) or by receive row (combine); 0 when gin is false.
  bool gin;
  size_t off_sslots;                                                     // [P] count slots
  size_t off_srsrc, off_srtok, off_sridx, off_srw, off_srscale, off_srx;  // [P][max_tokens]
  size_t off_scy, off_scw;                                               // [capacity]
  int sig;  // first of 4P signals (Comm::reserve_signals): kSigCounts.. per source, see below
  size_t total;

  // Count slot: [0] u64 tag, [8] i32 status, [16] i32 counts[P], then i32 experts[L] (the
  // receiver's), then i32 all[E] (every expert's; written for EpExpertPlaces only).
  TW_EP_HD size_t slot(int src) const { return off_slots + (size_t)src * slot_bytes; }
  TW_EP_HD size_t flag(size_t base, int src, int ch) const { return base + ((size_t)src * G + ch) * 8; }
  // GIN signals at a receiver, one counter per (phase, source), cumulative over calls: a
  // source's call e has landed when the counter reaches e times the adds per call.
  enum Phase { kSigCounts = 0, kSigRows = 1, kSigCombineStart = 2, kSigCombineRows = 3 };
  TW_EP_HD int signal(Phase ph, int src) const { return sig + (int)ph * P + src; }
};

// The window of the high-throughput mode for P ranks (this rank `me`) and G channels; `gin`
// adds the staging regions of the GIN path.
Geometry geometry(const EpConfig& c, int P, int me, int G, bool gin = false);

namespace ll {
// Low latency.
struct Geo {
  int P, me, L, E, topk, max_tokens, cap, G, hidden;
  size_t row_bytes, nsc;  // payload bytes per row; fp32 scales per row
  size_t slot_bytes;      // count slot: [0] tag, [8] verdict, [16] counts[E] of its source
  // Count slots [parity][source] and flags [parity][source][CTA] first (zeroed at creation);
  // then the receive block [L][cap] (each row's source rank, source token and top-k slot as
  // three int32 arrays [3][L cap], written by the sender with the row; scales; rows) and the
  // combine block [L][cap] bf16, expert l's rows at [l][0, count[l]).
  size_t off_slots, off_done, off_cdone, off_meta, off_scales, off_rows, off_y;
  // GIN (gin true: some peer is outside the LSA team). A GIN put reads a window, so what goes to
  // a GIN peer is first stored here: count slots [parity][destination], dispatch rows, scales
  // and the (source, token, slot) arrays [3][parity][pair t x topk + j]; and the landing rows
  // [t][j] of the combine rows GIN expert ranks put back. 0 when gin is false.
  bool gin;
  size_t off_sslots, off_smeta, off_sscales, off_srows, off_cy;
  int sig;  // first of 6P signals (Comm::reserve_signals), see Phase
  size_t total;
  // GIN signals at a receiver, one counter per (phase, call parity, source), cumulative over the
  // calls of that parity: counts get 1 add per call; dispatch rows one per put (a row, its
  // source, token and slot, fp8: its scales), combine rows one per row. The receiver knows how many to expect from the
  // counts (its running totals in Local::gin_total). Per parity because a rank may publish call
  // e + 1's counts while a peer still waits for call e's, and puts are not ordered.
  enum Phase { kSigCounts = 0, kSigRows = 1, kSigCombine = 2 };
  TW_EP_HD int signal(Phase ph, int parity, int src) const { return sig + ((int)ph * 2 + parity) * P + src; }
  TW_EP_HD size_t spair(int buf, int i) const { return (size_t)buf * max_tokens * topk + i; }
  TW_EP_HD size_t slot(int buf, int src) const { return off_slots + ((size_t)buf * P + src) * slot_bytes; }
  TW_EP_HD size_t done(size_t base, int buf, int src, int ch) const {
    return base + (((size_t)buf * P + src) * G + ch) * 8;
  }
  TW_EP_HD size_t cyrow(int t, int j) const { return (size_t)t * topk + j; }
  // Receive row r's source rank (k = 0), source token (1) or top-k slot (2); and the staged
  // copy of pair i's at parity buf.
  TW_EP_HD size_t meta(int k, size_t r) const { return off_meta + ((size_t)k * L * cap + r) * 4; }
  TW_EP_HD size_t smeta(int k, int buf, int i) const {
    return off_smeta + ((size_t)k * 2 * max_tokens * topk + spair(buf, i)) * 4;
  }
};

Geo geometry(const EpConfig& c, int P, int me, int G, bool gin = false);
}  // namespace ll

}  // namespace tw::ops::ep
