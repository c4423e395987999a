// `tilewire info` formatting (runtime/topology.hpp) from hand-built reports: no GPU, two GPUs
// with NVLink, and the env table. report_json is checked with a small strict JSON parser.
#include <cctype>

#include "cpu_util.hpp"
#include "tilewire/runtime/env.hpp"
#include "tilewire/runtime/topology.hpp"

namespace {
using tw_test::contains;
using tw_test::ScopedEnv;

// ------------------------------------------------------------------ a strict JSON checker
// Recursive descent over RFC 8259's grammar; returns "" when `s` is exactly one JSON value.
class Json {
 public:
  static std::string check(const std::string& s) {
    Json j{s};
    j.ws();
    if (!j.value()) return j.err;
    j.ws();
    if (j.i != s.size()) return "trailing characters at " + std::to_string(j.i);
    return "";
  }

 private:
  explicit Json(const std::string& s) : s(s) {}
  const std::string& s;
  size_t i = 0;
  std::string err;
  bool fail(const std::string& m) {
    if (err.empty()) err = m + " at offset " + std::to_string(i) + ": ..." + s.substr(i, 30);
    return false;
  }
  void ws() {
    while (i < s.size() && std::isspace((unsigned char)s[i])) ++i;
  }
  bool lit(const char* w) {
    const std::string t(w);
    if (s.compare(i, t.size(), t) != 0) return fail(std::string("expected ") + w);
    i += t.size();
    return true;
  }
  bool str() {
    if (!lit("\"")) return false;
    while (i < s.size() && s[i] != '"') {
      const unsigned char c = s[i];
      if (c < 0x20) return fail("raw control character in a string");
      if (c == '\\') {
        if (++i >= s.size()) return fail("dangling escape");
        if (s[i] == 'u') {
          for (int k = 1; k <= 4; ++k)
            if (i + k >= s.size() || !std::isxdigit((unsigned char)s[i + k])) return fail("bad \\u escape");
          i += 4;
        } else if (std::string("\"\\/bfnrt").find(s[i]) == std::string::npos) {
          return fail("bad escape");
        }
      }
      ++i;
    }
    return lit("\"");
  }
  bool num() {
    const size_t b = i;
    if (i < s.size() && s[i] == '-') ++i;
    if (i >= s.size() || !std::isdigit((unsigned char)s[i])) return fail("bad number");
    if (s[i] == '0')
      ++i;
    else
      while (i < s.size() && std::isdigit((unsigned char)s[i])) ++i;
    if (i < s.size() && s[i] == '.') {
      ++i;
      if (i >= s.size() || !std::isdigit((unsigned char)s[i])) return fail("bad fraction");
      while (i < s.size() && std::isdigit((unsigned char)s[i])) ++i;
    }
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
      ++i;
      if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
      if (i >= s.size() || !std::isdigit((unsigned char)s[i])) return fail("bad exponent");
      while (i < s.size() && std::isdigit((unsigned char)s[i])) ++i;
    }
    return i > b;
  }
  template <class Item>
  bool seq(char open, char close, Item item) {
    ++i;  // open
    ws();
    if (i < s.size() && s[i] == close) return ++i, true;
    while (true) {
      ws();
      if (!item()) return false;
      ws();
      if (i < s.size() && s[i] == ',') {
        ++i;
        continue;
      }
      if (i < s.size() && s[i] == close) return ++i, true;
      return fail(std::string("expected ',' or '") + close + "' after an item of '" + open + "'");
    }
  }
  bool value() {
    if (i >= s.size()) return fail("unexpected end");
    switch (s[i]) {
      case '{':
        return seq('{', '}', [&] { return str() && (ws(), lit(":")) && (ws(), value()); });
      case '[':
        return seq('[', ']', [&] { return value(); });
      case '"':
        return str();
      case 't':
        return lit("true");
      case 'f':
        return lit("false");
      case 'n':
        return lit("null");
      default:
        return num();
    }
  }
};

TEST(JsonChecker, SelfTest) {
  EXPECT_EQ(Json::check(R"({"a":[1,-2.5e3,true,null,"x\"y"],"b":{}})"), "");
  for (const char* bad : {"", "{", "{\"a\":1,}", "[1 2]", "{\"a\" 1}", "\"a\nb\"", "01", "{}}", "{'a':1}"})
    EXPECT_NE(Json::check(bad), "") << bad;
}

// ---------------------------------------------------------------------------- reports
size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

tw::SystemReport base_report() {
  tw::SystemReport r;
  r.tilewire_version = "0.1.0";
  r.nccl_header = r.nccl_runtime = 22809;
  r.nccl_match = true;
  r.cuda_driver = 13000;
  r.cuda_runtime = 13000;
  return r;
}

tw::SystemReport no_gpu_report() {
  tw::SystemReport r = base_report();
  r.no_gpu_reason = "cudaErrorNoDevice: no CUDA-capable device is detected";
  r.comm.error = "no GPU";
  return r;
}

tw::SystemReport two_gpu_report(int nvlinks) {
  tw::SystemReport r = base_report();
  for (int i = 0; i < 2; ++i) {
    tw::GpuInfo g;
    g.index = i;
    g.name = "NVIDIA H200";
    g.pci_bus_id = i ? "00000000:2A:00.0" : "00000000:19:00.0";
    g.sm_count = 132;
    g.cc_major = 9;
    g.memory_bytes = size_t{141} << 30;
    g.l2_bytes = size_t{60} << 20;
    g.sm_clock_mhz = 1980;
    g.mem_clock_mhz = 3201;
    r.gpus.push_back(g);
  }
  for (int a = 0; a < 2; ++a) r.links.push_back(tw::LinkInfo{a, 1 - a, true, nvlinks, 0});
  r.multicast_supported = true;
  r.multicast_policy_off = true;
  r.comm.probed = true;
  r.comm.nranks = r.comm.lsa_size = 2;
  r.comm.lsa_members = {0, 1};
  r.comm.gin_type = "not needed (every peer is in the LSA team)";
  return r;
}

TEST(Report, NoGpuText) {
  const std::string t = tw::format_report(no_gpu_report());
  EXPECT_TRUE(contains(t, "tilewire 0.1.0"));
  EXPECT_TRUE(contains(t, "no CUDA GPU"));
  EXPECT_TRUE(contains(t, "cudaErrorNoDevice"));
  EXPECT_TRUE(contains(t, "2.28.9"));
  EXPECT_TRUE(contains(t, "(match)"));
  EXPECT_FALSE(contains(t, "MISMATCH"));
}

TEST(Report, NoGpuJson) {
  const std::string j = tw::report_json(no_gpu_report());
  EXPECT_EQ(Json::check(j), "") << j;
  EXPECT_TRUE(contains(j, "\"gpu_present\":false"));
  EXPECT_TRUE(contains(j, "\"nccl_match\":true"));
  EXPECT_TRUE(contains(j, "\"nccl_header\":\"2.28.9\""));
  EXPECT_TRUE(contains(j, "\"gpus\":[]"));
  EXPECT_TRUE(contains(j, "\"probed\":false"));
}

TEST(Report, JsonEscapesStrings) {
  tw::SystemReport r = no_gpu_report();
  r.no_gpu_reason = "quote \" backslash \\ newline \n end";
  r.comm.error = "C:\\path \"x\"";
  const std::string j = tw::report_json(r);
  EXPECT_EQ(Json::check(j), "") << j;
}

TEST(Report, MismatchIsLoud) {
  tw::SystemReport r = no_gpu_report();
  r.nccl_runtime = 22803;
  r.nccl_match = false;
  const std::string t = tw::format_report(r);
  EXPECT_TRUE(contains(t, "2.28.3"));
  EXPECT_TRUE(contains(t, "MISMATCH"));
  EXPECT_TRUE(contains(tw::report_json(r), "\"nccl_match\":false"));
}

TEST(Report, TwoGpusWithNvlinkMatrix) {
  const std::string t = tw::format_report(two_gpu_report(18));
  EXPECT_TRUE(contains(t, "GPUs     2"));
  EXPECT_TRUE(contains(t, "NVIDIA H200"));
  EXPECT_TRUE(contains(t, "sm_90"));
  EXPECT_TRUE(contains(t, "GPU0"));
  EXPECT_TRUE(contains(t, "GPU1"));
  EXPECT_TRUE(contains(t, "NV18"));
  EXPECT_TRUE(contains(t, "LSA team  2 of 2 ranks: {0,1}"));
  EXPECT_FALSE(contains(t, "no CUDA GPU"));
  EXPECT_EQ(count(t, "NV18"), 2u) << "both off-diagonal cells:\n" << t;
}

TEST(Report, PeerCellsWithoutNvlink) {
  // The matrix header names "P2P" once; each off-diagonal cell adds one.
  tw::SystemReport r = two_gpu_report(0);
  const std::string p2p = tw::format_report(r);
  EXPECT_EQ(count(p2p, "P2P"), 3u) << p2p;
  EXPECT_EQ(count(p2p, "NV0"), 0u) << p2p;
  for (auto& l : r.links) l.peer_access = false;
  const std::string none = tw::format_report(r);
  EXPECT_EQ(count(none, "P2P"), 1u) << none;
  EXPECT_EQ(count(none, "--"), 2u) << none;
}

TEST(Report, TwoGpusJson) {
  const std::string j = tw::report_json(two_gpu_report(18));
  EXPECT_EQ(Json::check(j), "") << j;
  EXPECT_TRUE(contains(j, "\"gpu_present\":true"));
  EXPECT_TRUE(contains(j, "\"nvlinks\":18"));
  EXPECT_TRUE(contains(j, "\"name\":\"NVIDIA H200\""));
  EXPECT_TRUE(contains(j, "\"lsa_members\":[0,1]"));
  EXPECT_TRUE(contains(j, "\"used\":false")) << "tilewire never uses multicast";
}

TEST(Report, EnvTableListsEveryVariable) {
  ScopedEnv set("TILEWIRE_DEBUG", "1");
  const std::string t = tw::format_env_table();
  for (const tw::env::Var& v : tw::env::table()) {
    EXPECT_TRUE(contains(t, v.name));
    EXPECT_TRUE(contains(t, v.doc));
    EXPECT_TRUE(contains(t, std::string("default ") + v.default_value)) << v.name;
  }
  EXPECT_TRUE(contains(t, "TILEWIRE_DEBUG *")) << "variables set in the environment are marked";
  EXPECT_TRUE(contains(t, "now 1"));
}

}  // namespace
