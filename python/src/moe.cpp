// tilewire._C: the grouped GEMM and the MoE FFN (tilewire/ops/grouped_gemm.hpp, moe.hpp), with
// pointers and streams as integers like the other ops (ops.cpp); python/tilewire/moe.py checks
// every tensor before it calls these.
#include <nanobind/stl/string.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "bindings.hpp"
#include "tilewire/ops/grouped_gemm.hpp"
#include "tilewire/ops/moe.hpp"
#include "tilewire/runtime/errors.hpp"

namespace nb = nanobind;

namespace tw_py {
namespace {

struct PyMoe {
  std::unique_ptr<tw::MoE> moe;
  // Garbage-collected without close(): its EpBuffer's window is released collectively, which
  // peers do at other times, so the object is left alone (the communicator's close() frees it).
  ~PyMoe() {
    if (!moe) return;
    std::fprintf(stderr, "tilewire: a MoE was garbage-collected without close(); its memory stays until the "
                         "communicator is closed\n");
    (void)moe.release();
  }
};

}  // namespace

void bind_moe(nb::module_& m) {
  m.def("grouped_gemm",
        [](uintptr_t A, uintptr_t B, uintptr_t C, uintptr_t counts, uintptr_t offsets, int groups, int N, int K, int rows,
           int group_rows, const std::string& b_layout, const std::string& tile, int rows_hint, uintptr_t status,
           uintptr_t stream) {
          tw::GroupedGemmArgs a;
          a.A = ptr<const void>(A), a.B = ptr<const void>(B), a.C = ptr(C);
          a.counts = ptr<const int>(counts), a.offsets = ptr<const int>(offsets);
          a.groups = groups, a.N = N, a.K = K, a.rows = rows, a.group_rows = group_rows;
          const std::optional<tw::BLayout> l = tw::parse_blayout(b_layout);
          TW_REQUIRE(l.has_value(), kInvalidArgument, "b_layout '" + b_layout + "' is not 'nk' or 'kn'");
          a.b_layout = *l;
          a.status = ptr<int>(status);
          tw::GroupedGemmConfig cfg;
          const std::optional<tw::GroupedTile> t = tw::parse_grouped_tile(tile);
          TW_REQUIRE(t.has_value(), kInvalidArgument, "tile '" + tile + "' is not one of auto, 64x128pp, 64x256pp, 128x256coop");
          cfg.tile = *t, cfg.rows_hint = rows_hint;
          nb::gil_scoped_release unlocked;
          tw::grouped_gemm(a, cfg, stream_of(stream));
        });

  nb::class_<PyMoe>(m, "MoE")
      .def("__init__",
           [](PyMoe* self, PyComm& c, int max_tokens_per_rank, int hidden, int ffn, int topk, int num_experts,
              bool low_latency, int max_expert_rows, int num_sms, bool overlap, int fused_combine,
              bool gate_up_interleaved, int direct_dispatch, bool slot_combine) {
             tw::MoeConfig cfg;
             cfg.ep.max_tokens_per_rank = max_tokens_per_rank, cfg.ep.hidden = hidden, cfg.ep.topk = topk;
             cfg.ep.num_experts = num_experts, cfg.ep.num_sms = num_sms;
             cfg.ep.mode = low_latency ? tw::EpMode::kLowLatency : tw::EpMode::kHighThroughput;
             cfg.ffn = ffn, cfg.max_expert_rows = max_expert_rows, cfg.overlap = overlap;
             if (fused_combine >= 0) cfg.fused_combine = fused_combine != 0;  // < 0: the library's default
             if (direct_dispatch >= 0) cfg.direct_dispatch = direct_dispatch != 0;
             cfg.slot_combine = slot_combine;
             cfg.gate_up = gate_up_interleaved ? tw::MoeGateUp::kInterleaved8 : tw::MoeGateUp::kGateThenUp;
             new (self) PyMoe();
             nb::gil_scoped_release unlocked;
             self->moe = std::make_unique<tw::MoE>(c.get(), cfg);
           })
      .def_prop_ro("bytes", [](const PyMoe& e) { return e.moe->bytes(); })
      .def("forward",
           [](PyMoe& e, uintptr_t x, int num_tokens, uintptr_t topk_idx, bool idx64, uintptr_t topk_weights,
              uintptr_t w_gate_up, uintptr_t w_down, uintptr_t out, uintptr_t stream) {
             tw::MoeArgs a;
             a.x = ptr<const void>(x), a.num_tokens = num_tokens, a.topk_idx = ptr<const void>(topk_idx);
             a.index_type = idx64 ? tw::EpIndex::kInt64 : tw::EpIndex::kInt32;
             a.topk_weights = ptr<const float>(topk_weights);
             a.w_gate_up = ptr<const void>(w_gate_up), a.w_down = ptr<const void>(w_down), a.out = ptr(out);
             nb::gil_scoped_release unlocked;
             e.moe->forward(a, stream_of(stream));
           })
      .def("check", [](PyMoe& e, uintptr_t stream) {
        nb::gil_scoped_release unlocked;
        e.moe->check(stream_of(stream));
      })
      .def("close", [](PyMoe& e) {
        nb::gil_scoped_release unlocked;
        e.moe.reset();  // collective: its EpBuffer's window
      });
}

}  // namespace tw_py
