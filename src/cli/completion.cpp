// flashbench completion bash|zsh|fish: a shell completion script written from the command line's own
// definition (every subcommand, option and description CLI11 holds), so that it cannot drift from
// the options as they are. An option whose values are a known set (--variant, --impl, --dtype,
// --backend, --isa, --mask, run's --format) completes them; any other value completes as a file name.
#include <algorithm>
#include <array>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "flashbench/core/errors.hpp"
#include "flashbench/core/variant.hpp"
#include "flashbench/harness/registry.hpp"
#include "flashbench/report/reporter.hpp"

namespace flashbench::cli {

namespace {

constexpr std::array<const char*, 3> kShells = {"bash", "zsh", "fish"};

struct OptionEntry {
  std::vector<std::string> names;  // "--seq", "-n"
  bool takes_value = false;
  std::string description;  // its first line, up to the first sentence's end
  std::vector<std::string> choices;  // the words its value takes, where they are a known set
};

struct CommandEntry {
  std::string name, description;
  std::vector<OptionEntry> options;
  std::vector<std::string> positional_choices;  // the words a positional argument takes, where known
};

std::string first_sentence(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  const size_t stop = line.find(". ");
  if (stop != std::string::npos) line = line.substr(0, stop);
  return line;
}

// The words the value of `command`'s option `name` (its long name) takes, from where each set is
// defined (the variants, dtypes, the registry's devices, implementations and ISAs, the report
// formats); empty where the value is free (a number, a file).
std::vector<std::string> value_choices(const std::string& command, const std::string& name) {
  std::vector<std::string> words;
  if (name == "--variant" || name == "--variants") {
    for (Variant variant : kAllVariants) words.emplace_back(to_string(variant));
    if (command != "grad") words.emplace_back("all");
  } else if (name == "--dtype") {
    for (Dtype dtype : kAllDtypes) words.emplace_back(to_string(dtype));
  } else if (name == "--backend" || name == "--device") {
    for (const DeviceEntry& device : registry().devices()) words.push_back(device.name);
  } else if (name == "--impl") {
    for (const DeviceEntry& device : registry().devices())
      for (const auto& implementation : device.implementations())
        if (std::find(words.begin(), words.end(), implementation->name()) == words.end())
          words.emplace_back(implementation->name());
  } else if (name == "--isa") {
    if (const DeviceEntry* device = registry().device_with_isa()) words = device->isa_names;
  } else if (name == "--mask") {
    words = {"false", "true", "both"};  // sweep.cpp's parse of --mask
  } else if (name == "--format" && command == "run") {
    for (std::string_view rest = kReportFormats; !rest.empty();) {  // "table, json, ..."
      const size_t comma = rest.find(", ");
      words.emplace_back(rest.substr(0, comma));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 2);
    }
  }
  return words;
}

OptionEntry option_entry(const std::string& command, const CLI::Option& option) {
  OptionEntry entry;
  for (const std::string& name : option.get_lnames()) entry.names.push_back("--" + name);
  for (const std::string& name : option.get_snames()) entry.names.push_back("-" + name);
  entry.takes_value = option.get_type_size() > 0;
  entry.description = first_sentence(option.get_description());
  if (entry.takes_value)
    for (const std::string& name : entry.names)
      if (entry.choices.empty()) entry.choices = value_choices(command, name);
  return entry;
}

std::vector<CommandEntry> describe_commands(const CLI::App& app) {
  std::vector<CommandEntry> commands;
  for (const CLI::App* sub : app.get_subcommands({})) {
    CommandEntry command{sub->get_name(), first_sentence(sub->get_description()), {}, {}};
    for (const CLI::Option* option : sub->get_options({})) {
      if (option->get_positional()) continue;
      command.options.push_back(option_entry(command.name, *option));
    }
    if (command.name == "completion") command.positional_choices.assign(kShells.begin(), kShells.end());
    commands.push_back(std::move(command));
  }
  return commands;
}

std::string join(const std::vector<std::string>& words) {
  std::string text;
  for (const std::string& word : words) text += (text.empty() ? "" : " ") + word;
  return text;
}

// Inside single quotes in every one of the three shells: a quote closes, is escaped, reopens.
std::string single_quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

std::string bash_script(const std::vector<CommandEntry>& commands) {
  std::vector<std::string> names;
  for (const CommandEntry& command : commands) names.push_back(command.name);
  std::string cases, value_cases;
  for (const CommandEntry& command : commands) {
    std::vector<std::string> all, valued;
    for (const OptionEntry& option : command.options)
      for (const std::string& name : option.names) {
        all.push_back(name);
        if (option.takes_value) valued.push_back(name);
        if (!option.choices.empty())
          value_cases += fmt::format("    {}) COMPREPLY=($(compgen -W {} -- \"$cur\")); return ;;\n",
                                     single_quoted(command.name + " " + name), single_quoted(join(option.choices)));
      }
    cases += fmt::format("    {}) options={}; valued={}; words={} ;;\n", command.name, single_quoted(join(all)),
                         single_quoted(join(valued)), single_quoted(join(command.positional_choices)));
  }
  return fmt::format(R"(# bash completion for flashbench, written by `flashbench completion bash`.
# Load it with: source <(flashbench completion bash)
_flashbench() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}} command= i
  for ((i = 1; i < COMP_CWORD; i++)); do
    case ${{COMP_WORDS[i]}} in
      -*) ;;
      *) command=${{COMP_WORDS[i]}}; break ;;
    esac
  done
  if [[ -z $command ]]; then
    COMPREPLY=($(compgen -W '{} --help --version' -- "$cur"))
    return
  fi
  case "$command $prev" in
{}  esac
  local options= valued= words=
  case $command in
{}  esac
  if [[ " $valued " == *" $prev "* ]]; then
    COMPREPLY=($(compgen -f -- "$cur"))
  elif [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$options" -- "$cur"))
  elif [[ -n $words ]]; then
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}}
complete -o filenames -F _flashbench flashbench
)",
                     join(names), value_cases, cases);
}

// zsh's _arguments specs: a description goes in [...], where ], [, : and \ need a backslash.
std::string zsh_description(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '[' || c == ']' || c == ':' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string zsh_script(const std::vector<CommandEntry>& commands) {
  std::string command_list, cases;
  for (const CommandEntry& command : commands) {
    command_list += "    " + single_quoted(command.name + ":" + zsh_description(command.description)) + "\n";
    std::string specs;
    for (const OptionEntry& option : command.options)
      for (const std::string& name : option.names)
        specs += " \\\n        " +
                 single_quoted(name + "[" + zsh_description(option.description) + "]" +
                               (!option.choices.empty() ? ":value:(" + join(option.choices) + ")"
                                : option.takes_value   ? ":value:_files"
                                                       : ""));
    const std::string rest = command.positional_choices.empty()
                                 ? "'*:file:_files'"
                                 : single_quoted("1:shell:(" + join(command.positional_choices) + ")");
    cases += fmt::format("        {}) _arguments{} \\\n        {} ;;\n", command.name, specs, rest);
  }
  return fmt::format(R"(#compdef flashbench
# zsh completion for flashbench, written by `flashbench completion zsh`.
# Load it with: source <(flashbench completion zsh) (after compinit), or save it as _flashbench in $fpath.
_flashbench() {{
  local context state state_descr line
  typeset -A opt_args
  _arguments -C '(- *)--help[Print help]' '(- *)--version[Print the version]' \
    '1:command:->command' '*::argument:->argument'
  case $state in
    command)
      local -a commands
      commands=(
{}      )
      _describe -t commands 'flashbench command' commands ;;
    argument)
      case $words[1] in
{}      esac ;;
  esac
}}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
  _flashbench "$@"
else
  compdef _flashbench flashbench
fi
)",
                     command_list, cases);
}

std::string fish_script(const std::vector<CommandEntry>& commands) {
  // fish's single quotes take \' and \\ as escapes.
  const auto quoted = [](const std::string& text) {
    std::string out = "'";
    for (char c : text) {
      if (c == '\'' || c == '\\') out += '\\';
      out += c;
    }
    return out + "'";
  };
  std::string names;
  for (const CommandEntry& command : commands) names += (names.empty() ? "" : " ") + command.name;
  std::string lines = "# fish completion for flashbench, written by `flashbench completion fish`.\n"
                      "# Load it with: flashbench completion fish | source\n"
                      "complete -c flashbench -f\n"
                      "complete -c flashbench -n __fish_use_subcommand -l help -d 'Print help'\n"
                      "complete -c flashbench -n __fish_use_subcommand -l version -d 'Print the version'\n";
  for (const CommandEntry& command : commands)
    lines += fmt::format("complete -c flashbench -n __fish_use_subcommand -a {} -d {}\n", command.name,
                         quoted(command.description));
  for (const CommandEntry& command : commands) {
    const std::string condition = quoted("__fish_seen_subcommand_from " + command.name);
    for (const OptionEntry& option : command.options) {
      std::string names_part;
      for (const std::string& name : option.names)
        names_part += name.starts_with("--") ? " -l " + name.substr(2) : " -s " + name.substr(1);
      const std::string value = !option.choices.empty() ? " -r -f -a " + quoted(join(option.choices))
                                : option.takes_value     ? std::string(" -r -F")
                                                         : std::string();
      lines += fmt::format("complete -c flashbench -n {}{}{} -d {}\n", condition, names_part, value,
                           quoted(option.description));
    }
    if (!command.positional_choices.empty())
      lines += fmt::format("complete -c flashbench -n {} -a {}\n", condition, quoted(join(command.positional_choices)));
  }
  return lines;
}

}  // namespace

void register_completion(CLI::App& app) {
  auto shell = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand("completion", "Print a shell completion script: bash, zsh or fish");
  sub->footer("bash: source <(flashbench completion bash)    zsh: source <(flashbench completion zsh)\n"
              "fish: flashbench completion fish | source");
  sub->add_option("shell", *shell, "bash, zsh or fish")
      ->required()
      ->check(CLI::IsMember(std::vector<std::string>(kShells.begin(), kShells.end())));
  CLI::App* parent = &app;
  set_action(sub, [shell, parent](const std::vector<std::string>&) {
    const std::vector<CommandEntry> commands = describe_commands(*parent);
    if (*shell == "bash") std::cout << bash_script(commands);
    else if (*shell == "zsh") std::cout << zsh_script(commands);
    else std::cout << fish_script(commands);
    return 0;
  });
}

}  // namespace flashbench::cli
