#pragma once
// What the two executables of the command line share (torch-free). `headroom` runs the commands
// that only read files (plan, simulate, compare) itself, without loading libtorch (docs/results.md,
// "compare and the commands that do not load libtorch"); the commands that run torch work it
// hands, with the same arguments, to `headroom-torch` beside it.
#include <CLI/CLI.hpp>

#include <array>
#include <filesystem>
#include <functional>
#include <optional>
#include <string_view>

namespace headroom::cli {

inline constexpr int kExitOk = 0, kExitFailure = 1, kExitUsage = 2;

struct CommandInfo {
  std::string_view name;
  std::string_view description;
};
// The commands headroom-torch runs, in the order `headroom --help` lists them among the others.
inline constexpr std::array kTorchCommands = {
    CommandInfo{"models", "list the zoo models and their size settings"},
    CommandInfo{"profile", "measure a model's per-layer memory and time into a trace"},
    CommandInfo{"execute", "run a plan in real training and compare predicted with measured"},
    CommandInfo{"calibrate",
                "time this machine's matrix product, convolution and memory bandwidth, as traces and plans compare machines"},
    CommandInfo{"demo", "the whole loop on bert tiny: profile, the whole batch refused under a budget, plan, execute"},
};
bool is_torch_command(std::string_view name);
// A torch command's subcommand on `app`, with its description from the table.
CLI::App* add_torch_command(CLI::App& app, std::string_view name);

// headroom-torch, in the directory of the running executable.
std::filesystem::path torch_executable();
// Set in the environment of the headroom-torch that `headroom` starts: `headroom` started with it
// set was started by itself (a headroom-torch that is a copy of headroom), and refuses to loop.
inline constexpr const char* kHandedOn = "HEADROOM_HANDED_ON";
bool handed_on_already();
// Replaces this process with headroom-torch on the same arguments, its thread pools passive
// (runtime/host_info.h); returns only where it could not (said on stderr), with the exit code.
int run_torch_command(char** argv);

// The exit code for a first argument that is no command of `app`'s (named, with the commands; CLI11
// would report it as a missing one), or nothing.
std::optional<int> refuse_unknown_command(const CLI::App& app, int argc, char** argv);
// Parses, answering --help, --version and usage errors (one line naming the flag); the exit code
// where the command is not to run.
std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv);

// Where results go is checked before any work: a long profile must not end at a path it cannot
// write, and a device or FIFO given as an output is refused rather than replaced or waited on.
// An output that is one of the command's inputs (a trace or a plan) would be overwritten by it.
void check_outputs(const CLI::App& command);

// Runs `command`, reporting what it throws as one line on stderr with its exit code: 2 for bad
// input, 3 where nothing fits, 1 otherwise.
int run_reporting_errors(const std::function<int()>& command);

}  // namespace headroom::cli
