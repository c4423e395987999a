// The trace file: Chrome trace-event JSON for the viewers, with the raw trace under "tilewire".
//
//   {"displayTimeUnit":"ns",                 first: older Perfetto reads it only at the start
//    "traceEvents":[ M (names), X (intervals), i (instants) ],
//    "tilewire":{"format":"tilewire.trace","version":1,"nranks":P,"residual_ns":..,"dropped":..,
//                "offset_ns":[..],"kinds":[names by code],"event_fields":["t_ns","id","rank","sm","kind"],
//                "events":[[t_ns,id,rank,sm,kind],...],       raw: each on its own GPU's clock
//                "metrics":{metrics_json}}}                   last: viewers skip what follows traceEvents
//
// Process pid = rank + 1 ("rank N"); thread tid = 1 + (2 * sm + role) * 1000 + lane, role 0 compute,
// 1 comm. Intervals that overlap on one SM go to further lanes ("SM k comm +1"): JSON viewers need
// the slices of one thread to nest, and a tile's communication outlives the next tile's mainloop.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "json.hpp"
#include "spans.hpp"
#include "tilewire/runtime/errors.hpp"
#include "tilewire/trace/trace.hpp"

namespace tw::trace {
namespace {

constexpr int kVersion = 1;
constexpr const char* kFormat = "tilewire.trace";

// ns -> microseconds with exactly three decimals (exact, no floating point).
std::string us(int64_t ns) {
  const bool neg = ns < 0;
  const uint64_t a = neg ? (uint64_t)(-ns) : (uint64_t)ns;
  char b[40];
  std::snprintf(b, sizeof(b), "%s%llu.%03llu", neg ? "-" : "", (unsigned long long)(a / 1000),
                (unsigned long long)(a % 1000));
  return b;
}

enum Track { kComputeTrack = 0, kCommTrack = 1 };

int tid_of(int sm, int role, int lane) { return 1 + (2 * sm + role) * 1000 + lane; }

struct Slice {
  int rank;
  int role;
  uint8_t sm;
  uint64_t begin, end;
  std::string name;
  std::string args;  // JSON object
  int lane = 0;
};

struct Instant {
  int rank;
  int role;
  uint8_t sm;
  uint64_t t;
  std::string name;
  std::string args;
};

// Greedy lanes per (rank, sm, role): a slice goes to the first lane whose last slice ended.
void assign_lanes(std::vector<Slice>& slices) {
  std::sort(slices.begin(), slices.end(), [](const Slice& a, const Slice& b) {
    return std::tie(a.rank, a.sm, a.role, a.begin, a.end) < std::tie(b.rank, b.sm, b.role, b.begin, b.end);
  });
  std::map<std::tuple<int, int, int>, std::vector<uint64_t>> lane_end;
  for (Slice& s : slices) {
    std::vector<uint64_t>& ends = lane_end[{s.rank, s.sm, s.role}];
    size_t l = 0;
    while (l < ends.size() && ends[l] > s.begin) ++l;
    if (l == ends.size()) ends.push_back(0);
    ends[l] = s.end;
    s.lane = (int)l;
  }
}

std::string kind_list() {
  std::string s = "[";
  for (int k = 0; k < (int)EventKind::kCount; ++k)
    s += std::string(k ? "," : "") + "\"" + kind_name((EventKind)k) + "\"";
  return s + "]";
}

}  // namespace

std::string to_perfetto_json(const Trace& trace, const Metrics* metrics) {
  Metrics computed;
  if (metrics == nullptr) {
    computed = compute_metrics(trace);
    metrics = &computed;
  }
  const std::vector<Event> ev = trace.align();
  const std::vector<detail::RankEvents> ranks = detail::group_by_rank(ev, trace.nranks);
  const uint64_t t0 = ev.empty() ? 0 : ev.front().t_ns;

  std::vector<Slice> slices;
  std::vector<Instant> instants;
  auto id_args = [](int rank, uint32_t id, const char* extra = nullptr) {
    std::string a = "{\"rank\":" + std::to_string(rank) + ",\"id\":" + std::to_string(id);
    if (extra) a += std::string(",\"start\":\"") + extra + "\"";
    return a + "}";
  };
  auto instant = [&](int rank, uint32_t id, EventKind k, uint64_t t, uint8_t sm) {
    const int role = role_of(k) == Role::kComm ? kCommTrack : kComputeTrack;
    instants.push_back(
        Instant{rank, role, sm, t, std::string(kind_name(k)) + " " + std::to_string(id), id_args(rank, id)});
  };

  for (int r = 0; r < trace.nranks; ++r) {
    for (const auto& [id, t] : ranks[r].tiles) {
      detail::Span s;
      const bool comp = detail::compute_span(t, &s) && s.end >= s.begin;
      if (comp)
        slices.push_back(Slice{r, kComputeTrack, s.sm, s.begin, s.end, "tile " + std::to_string(id), id_args(r, id)});
      const bool comm = detail::tile_comm_span(t, &s) && s.end >= s.begin;
      if (comm)
        slices.push_back(Slice{r, kCommTrack, s.sm, s.begin, s.end, "tile " + std::to_string(id) + " comm",
                               id_args(r, id, kind_name(detail::comm_start_kind(t)))});
      const EventKind used_start = comm ? detail::comm_start_kind(t) : EventKind::kCount;
      // Points inside the owner's work, and whatever no interval used.
      for (int k = (int)EventKind::kMmaStart; k <= (int)EventKind::kTileLanded; ++k) {
        const auto kind = (EventKind)k;
        if (!t.has(kind)) continue;
        const bool in_slice = ((kind == EventKind::kMmaStart || kind == EventKind::kMmaEnd) && comp) ||
                              ((kind == used_start || kind == EventKind::kTileLanded) && comm);
        if (!in_slice)
          instant(r, id, kind,
                  kind == EventKind::kTileLanded || kind == EventKind::kMmaEnd ? t.latest(kind) : t.earliest(kind),
                  t.first_sm[k]);
      }
    }
    for (const auto& [id, c] : ranks[r].chunks) {
      detail::Span s;
      if (detail::chunk_comm_span(c, &s) && s.end >= s.begin) {
        slices.push_back(Slice{r, kCommTrack, s.sm, s.begin, s.end, "chunk " + std::to_string(id), id_args(r, id)});
      } else {
        for (EventKind k : {EventKind::kChunkSend, EventKind::kChunkRecv})
          if (c.has(k)) instant(r, id, k, c.earliest(k), c.first_sm[(int)k]);
      }
    }
  }
  for (const Event& e : ev)
    if (detail::is_kernel_kind((EventKind)e.kind)) instant(e.rank, e.id, (EventKind)e.kind, e.t_ns, e.sm);
  assign_lanes(slices);

  std::ostringstream o;
  o << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[";
  bool first = true;
  auto sep = [&]() -> std::ostringstream& {
    if (!first) o << ",\n";
    first = false;
    return o;
  };
  // names: every (rank, track) that holds something
  std::set<std::tuple<int, int, int, int>> tracks;  // rank, sm, role, lane
  for (const Slice& s : slices) tracks.insert({s.rank, s.sm, s.role, s.lane});
  for (const Instant& i : instants) tracks.insert({i.rank, i.sm, i.role, 0});
  std::set<int> procs;
  for (int r = 0; r < trace.nranks; ++r) procs.insert(r);
  for (int r : procs) {
    sep() << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << r + 1 << ",\"args\":{\"name\":\"rank " << r
          << "\"}}";
    sep() << "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" << r + 1 << ",\"args\":{\"sort_index\":" << r
          << "}}";
  }
  for (const auto& [rank, sm, role, lane] : tracks) {
    const int tid = tid_of(sm, role, lane);
    std::string name = "SM " + std::to_string(sm) + (role == kComputeTrack ? " compute" : " comm");
    if (lane) name += " +" + std::to_string(lane);
    sep() << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" << rank + 1 << ",\"tid\":" << tid
          << ",\"args\":{\"name\":" << json::quote(name) << "}}";
    sep() << "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":" << rank + 1 << ",\"tid\":" << tid
          << ",\"args\":{\"sort_index\":" << tid << "}}";
  }
  for (const Slice& s : slices)
    sep() << "{\"name\":" << json::quote(s.name) << ",\"cat\":\"" << (s.role == kComputeTrack ? "compute" : "comm")
          << "\",\"ph\":\"X\",\"ts\":" << us((int64_t)(s.begin - t0)) << ",\"dur\":" << us((int64_t)(s.end - s.begin))
          << ",\"pid\":" << s.rank + 1 << ",\"tid\":" << tid_of(s.sm, s.role, s.lane) << ",\"args\":" << s.args << "}";
  for (const Instant& i : instants)
    sep() << "{\"name\":" << json::quote(i.name) << ",\"cat\":\"" << (i.role == kComputeTrack ? "compute" : "comm")
          << "\",\"ph\":\"i\",\"s\":\"t\",\"ts\":" << us((int64_t)(i.t - t0)) << ",\"pid\":" << i.rank + 1
          << ",\"tid\":" << tid_of(i.sm, i.role, 0) << ",\"args\":" << i.args << "}";
  o << "],\n\"tilewire\":{\"format\":\"" << kFormat << "\",\"version\":" << kVersion << ",\"nranks\":" << trace.nranks
    << ",\"residual_ns\":" << trace.residual_ns << ",\"dropped\":" << trace.dropped << ",\"offset_ns\":[";
  for (size_t i = 0; i < trace.offset_ns.size(); ++i) o << (i ? "," : "") << trace.offset_ns[i];
  o << "],\"kinds\":" << kind_list() << ",\"event_fields\":[\"t_ns\",\"id\",\"rank\",\"sm\",\"kind\"],\"events\":[";
  for (size_t i = 0; i < trace.events.size(); ++i) {
    const Event& e = trace.events[i];
    o << (i ? ",\n" : "\n") << "[" << e.t_ns << "," << e.id << "," << e.rank << "," << (unsigned)e.sm << ","
      << (unsigned)e.kind << "]";
  }
  o << "],\n\"metrics\":" << metrics_json(*metrics) << "}}\n";
  return o.str();
}

Trace from_json(const std::string& text) {
  const json::Value root = json::parse(text);
  const json::Value* tw = root.find("tilewire");
  TW_REQUIRE(tw != nullptr && tw->type == json::Value::Type::kObject, kInvalidArgument,
             "trace JSON: no \"tilewire\" object at the top level: not a trace written by tilewire "
             "(tw::trace::to_perfetto_json / save_trace_file)");
  const json::Value* fmt = tw->find("format");
  TW_REQUIRE(fmt && fmt->type == json::Value::Type::kString && fmt->s == kFormat, kInvalidArgument,
             std::string("trace JSON: tilewire.format is not \"") + kFormat + "\"");
  const json::Value* ver = tw->find("version");
  TW_REQUIRE(ver && json::as_int64(*ver, "tilewire.version") == kVersion, kInvalidArgument,
             "trace JSON: tilewire.version is not " + std::to_string(kVersion) + " (written by another tilewire?)");
  auto need = [&](const char* key) -> const json::Value& {
    const json::Value* v = tw->find(key);
    TW_REQUIRE(v != nullptr, kInvalidArgument, std::string("trace JSON: tilewire.") + key + " is missing");
    return *v;
  };
  Trace t;
  const int64_t nranks = json::as_int64(need("nranks"), "tilewire.nranks");
  TW_REQUIRE(nranks >= 0 && nranks <= 0x10000, kInvalidArgument, "trace JSON: tilewire.nranks out of range");
  t.nranks = (int)nranks;
  t.residual_ns = json::as_int64(need("residual_ns"), "tilewire.residual_ns");
  t.dropped = json::as_uint64(need("dropped"), "tilewire.dropped");
  const json::Value& off = need("offset_ns");
  TW_REQUIRE(off.type == json::Value::Type::kArray, kInvalidArgument, "trace JSON: tilewire.offset_ns is not an array");
  for (const json::Value& v : off.a) t.offset_ns.push_back(json::as_int64(v, "tilewire.offset_ns[]"));
  TW_REQUIRE(t.offset_ns.empty() || t.offset_ns.size() == (size_t)t.nranks, kInvalidArgument,
             "trace JSON: tilewire.offset_ns has " + std::to_string(t.offset_ns.size()) + " entries for " +
                 std::to_string(t.nranks) + " ranks");
  const json::Value& evs = need("events");
  TW_REQUIRE(evs.type == json::Value::Type::kArray, kInvalidArgument, "trace JSON: tilewire.events is not an array");
  t.events.reserve(evs.a.size());
  for (size_t i = 0; i < evs.a.size(); ++i) {
    const json::Value& a = evs.a[i];
    const std::string where = "tilewire.events[" + std::to_string(i) + "]";
    TW_REQUIRE(a.type == json::Value::Type::kArray && a.a.size() == 5, kInvalidArgument,
               "trace JSON: " + where + " is not [t_ns, id, rank, sm, kind]");
    const uint64_t id = json::as_uint64(a.a[1], where.c_str()), rank = json::as_uint64(a.a[2], where.c_str());
    const uint64_t sm = json::as_uint64(a.a[3], where.c_str()), kind = json::as_uint64(a.a[4], where.c_str());
    TW_REQUIRE(id <= 0xFFFFFFFFull && rank < (uint64_t)t.nranks && sm <= 0xFF && kind < (uint64_t)EventKind::kCount,
               kInvalidArgument, "trace JSON: " + where + " has a field out of range (id, rank < nranks, sm, kind)");
    Event e{};
    e.t_ns = json::as_uint64(a.a[0], where.c_str());
    e.id = (uint32_t)id;
    e.rank = (uint16_t)rank;
    e.sm = (uint8_t)sm;
    e.kind = (uint8_t)kind;
    t.events.push_back(e);
  }
  return t;
}

void save_trace_file(const std::string& path, const Trace& trace, const Metrics* metrics) {
  const std::string text = to_perfetto_json(trace, metrics);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  TW_REQUIRE(f.good(), kInvalidArgument, "cannot write trace file '" + path + "': " + std::strerror(errno));
  f << text;
  f.close();
  TW_REQUIRE(!f.fail(), kInvalidArgument, "writing trace file '" + path + "' failed: " + std::strerror(errno));
}

Trace load_trace_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  TW_REQUIRE(f.good(), kInvalidArgument, "cannot read trace file '" + path + "': " + std::strerror(errno));
  std::ostringstream s;
  s << f.rdbuf();
  try {
    return from_json(s.str());
  } catch (const Error& e) {
    std::string m = e.what();
    if (m.rfind("tilewire: ", 0) == 0) m.erase(0, 10);
    throw Error(e.code(), "tilewire: " + path + ": " + m);
  }
}

}  // namespace tw::trace
