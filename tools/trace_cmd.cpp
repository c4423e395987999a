// tools/trace_cmd.cpp — `tilewire trace summarize FILE.json [--json] [--plot out.png]`: read a trace
// file (tw::trace::save_trace_file), print its metrics, optionally draw the timeline with
// scripts/plot_trace.py (python3 + matplotlib; scripts/setup.sh installs them).
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "commands.hpp"
#include "tilewire/runtime/errors.hpp"
#include "tilewire/trace/trace.hpp"

extern char** environ;

namespace tw::cli {
namespace {

constexpr const char* kTraceUsage =
    "usage: tilewire trace summarize FILE.json [--json] [--plot OUT.png]\n"
    "  Reads a trace written by tilewire (tw::trace::save_trace_file: Chrome trace-event JSON that\n"
    "  ui.perfetto.dev loads) and prints per rank and overall: kernel span, time to first byte,\n"
    "  compute/communication time, overlap %, link-busy %, exposed communication, tile latency\n"
    "  p50/p99/max, and any missing events (definitions: docs/tracing.md).\n"
    "  --json          print the metrics as JSON instead of the table\n"
    "  --plot OUT.png  also draw the timeline (scripts/plot_trace.py; needs python3 + matplotlib)\n";

[[noreturn]] void bad(const std::string& msg) {
  throw Error(Errc::kInvalidArgument, "trace: " + msg + " (tilewire trace --help)");
}

bool is_file(const std::string& p) { return !p.empty() && access(p.c_str(), R_OK) == 0; }

// The plotting script: installed next to the binary (share/tilewire), else in the source tree.
std::string find_plot_script() {
  char exe[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    std::string dir(exe, (size_t)n);
    dir = dir.substr(0, dir.find_last_of('/'));
    const std::string installed = dir + "/../share/tilewire/plot_trace.py";
    if (is_file(installed)) return installed;
  }
#ifdef TILEWIRE_SOURCE_DIR
  const std::string src = std::string(TILEWIRE_SOURCE_DIR) + "/scripts/plot_trace.py";
  if (is_file(src)) return src;
#endif
  throw Error(Errc::kUnsupported,
              "trace: scripts/plot_trace.py not found (looked next to the binary in ../share/tilewire and in the "
              "source tree); run it yourself: python3 scripts/plot_trace.py FILE.json -o OUT.png");
}

int run_plot(const std::string& trace_file, const std::string& out) {
  const std::string script = find_plot_script();
  std::vector<std::string> args = {"python3", script, trace_file, "-o", out, "--quiet"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, "python3", nullptr, nullptr, argv.data(), environ);
  if (rc != 0) throw Error(Errc::kUnsupported, std::string("trace: cannot run python3: ") + std::strerror(rc));
  int st = 0;
  while (waitpid(pid, &st, 0) < 0) {
    if (errno != EINTR) throw Error(Errc::kUnsupported, std::string("trace: waitpid: ") + std::strerror(errno));
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    throw Error(Errc::kUnsupported,
                "trace: " + script + " failed (" +
                    (WIFEXITED(st) ? "exit " + std::to_string(WEXITSTATUS(st)) : std::string("killed")) +
                    "); it needs python3 with matplotlib: scripts/setup.sh installs it");
  return 0;
}

int summarize(const std::vector<std::string>& args) {
  std::string file, plot;
  bool json = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kTraceUsage, stdout);
      return 0;
    } else if (a == "--json") {
      json = true;
    } else if (a == "--plot") {
      if (i + 1 >= args.size()) bad("--plot needs an output file name");
      plot = args[++i];
    } else if (a.rfind("--plot=", 0) == 0) {
      plot = a.substr(7);
    } else if (!a.empty() && a[0] == '-') {
      bad("summarize: unknown option '" + a + "'");
    } else if (file.empty()) {
      file = a;
    } else {
      bad("summarize: one trace file at a time ('" + file + "', then '" + a + "')");
    }
  }
  if (file.empty()) bad("summarize: which trace file?");
  const trace::Trace t = trace::load_trace_file(file);
  const trace::Metrics m = trace::compute_metrics(t);
  if (json)
    std::puts(trace::metrics_json(m).c_str());
  else
    std::fputs(trace::format_metrics(m).c_str(), stdout);
  if (!plot.empty()) {
    run_plot(file, plot);
    if (!json) std::printf("timeline: %s\n", plot.c_str());
  }
  return 0;
}

}  // namespace

int trace_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::fputs(kTraceUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string sub = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (sub == "summarize") return summarize(rest);
  bad("unknown subcommand '" + sub + "' (available: summarize)");
}

// For other commands (bench gemm-allreduce --plot): draw `trace_file` as a PNG timeline.
void plot_trace_file(const std::string& trace_file, const std::string& out) { run_plot(trace_file, out); }

}  // namespace tw::cli
