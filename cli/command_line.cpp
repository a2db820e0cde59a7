#include "cli/command_line.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "cli/flag_names.h"
#include "cli/plan_commands.h"
#include "core/atomic_file.h"
#include "core/errors.h"
#include "runtime/host_info.h"

namespace headroom::cli {

namespace {

// A flag neither the command nor the program knows, as typed; empty if none. CLI11 reports a
// missing required option before an unknown one, which would send the user after the wrong flag.
std::string first_unknown_flag(const CLI::App& app, int argc, char** argv) {
  if (argc < 2) return "";
  const CLI::App* command = nullptr;
  try {
    command = app.get_subcommand(argv[1]);
  } catch (const CLI::OptionNotFound&) {
    return "";
  }
  for (int i = 2; i < argc; ++i) {
    const std::string token = argv[i];
    if (token == "--") break;
    if (token.size() < 2 || token[0] != '-' || std::isdigit(static_cast<unsigned char>(token[1]))) continue;
    const std::string name = token.substr(0, token.find('='));
    if (command->get_option_no_throw(name) == nullptr && app.get_option_no_throw(name) == nullptr) return name;
  }
  return "";
}

}  // namespace

bool is_torch_command(std::string_view name) {
  return std::any_of(kTorchCommands.begin(), kTorchCommands.end(), [name](const CommandInfo& c) { return c.name == name; });
}

CLI::App* add_torch_command(CLI::App& app, std::string_view name) {
  const auto* info = std::find_if(kTorchCommands.begin(), kTorchCommands.end(), [name](const CommandInfo& c) { return c.name == name; });
  return app.add_subcommand(std::string(name), info == kTorchCommands.end() ? "" : std::string(info->description));
}

std::filesystem::path torch_executable() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  // Never a bare name, which execv would look for in the working directory.
  if (error) return "/proc/self/exe: unreadable (" + error.message() + ")/headroom-torch";
  return self.parent_path() / "headroom-torch";
}

bool handed_on_already() { return std::getenv(kHandedOn) != nullptr; }

int run_torch_command(char** argv) {
  runtime::set_passive_thread_pools();
  ::setenv(kHandedOn, "1", 1);
  const std::string torch = torch_executable().string();
  ::execv(torch.c_str(), argv);
  std::cerr << "headroom: cannot start " << torch << " (" << std::strerror(errno)
            << "), which runs the commands that train; it is built and installed beside headroom\n";
  return kExitFailure;
}

std::optional<int> refuse_unknown_command(const CLI::App& app, int argc, char** argv) {
  if (argc <= 1 || argv[1][0] == '-') return std::nullopt;
  std::string commands;
  bool known = false;
  for (const auto* sub : app.get_subcommands({})) {
    known |= sub->get_name() == argv[1];
    commands += (commands.empty() ? "" : ", ") + sub->get_name();
  }
  if (known) return std::nullopt;
  std::cerr << "headroom: unknown command '" << argv[1] << "' (commands: " << commands << ")\n";
  return kExitUsage;
}

std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  if (const std::optional<int> refused = refuse_unknown_command(app, argc, argv)) return refused;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string unknown = dynamic_cast<const CLI::RequiredError*>(&e) != nullptr ? first_unknown_flag(app, argc, argv) : "";
    std::cerr << "headroom: " << (unknown.empty() ? std::string(e.what()) : "The following argument was not expected: " + unknown)
              << " (see headroom --help)\n";
    return kExitUsage;
  }
  return std::nullopt;
}

void check_outputs(const CLI::App& command) {
  std::vector<std::string> inputs;
  for (const CLI::Option* option : command.get_options()) {
    const bool input_file = option->get_lnames().empty() || option->check_lname("torchscript");
    if (option->count() > 0 && input_file && !option->get_name().empty()) {
      inputs.push_back(option->as<std::string>());
    }
  }
  std::vector<std::filesystem::path> outputs;
  for (const CLI::Option* option : command.get_options()) {
    if (option->count() == 0 || option->get_lnames().empty()) continue;
    const std::string flag = "--" + option->get_lnames().front();
    if (flag != "--output" && flag != "--chrome") continue;
    const std::filesystem::path path = option->as<std::string>();
    try {
      core::check_output_path(path);
      std::error_code error;
      for (const auto& input : inputs) {
        if (std::filesystem::equivalent(path, input, error)) {
          throw core::InputError(path.string() + " is this command's input; write to another file");
        }
      }
      for (const auto& other : outputs) {
        if (std::filesystem::weakly_canonical(path, error) == std::filesystem::weakly_canonical(other, error)) {
          throw core::InputError(path.string() + " is also another output of this command");
        }
      }
      outputs.push_back(path);
    } catch (const core::InputError& e) {
      throw core::InputError(flag + ": " + e.what());
    }
  }
}

int run_reporting_errors(const std::function<int()>& command) {
  try {
    return command();
  } catch (const core::InputError& e) {
    std::cerr << "headroom: " << name_flag(e.what()) << "\n";
    return kExitUsage;
  } catch (const core::DoesNotFitError& e) {
    std::cerr << "headroom: " << e.what() << "\n";
    return kExitInfeasible;
  } catch (const std::exception& e) {
    std::cerr << "headroom: " << e.what() << "\n";
    return kExitFailure;
  }
}

}  // namespace headroom::cli
