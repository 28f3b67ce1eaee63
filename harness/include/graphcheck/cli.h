#pragma once
// The graphcheck CLI as a library (graphcheck::cli): a binary with its own models linked in gets
// the whole CLI (run, mutants, list, compare, inspect, reports, isolation) with
//
//   int main(int argc, char** argv) { return graphcheck::cli_main(argc, argv); }
//
// Models registered in the binary (GRAPHCHECK_REGISTER_MODEL) are known to every subcommand, as
// are those of plugins given with --plugin. Isolated scenarios re-execute the same binary.

#include <string>
#include <vector>

namespace graphcheck {

// Parses the command line and runs the subcommand; returns the process's exit code (0 passed,
// 1 a check failed, 2 bad usage, 3 harness failure, 128 + N stopped by signal N).
int cli_main(int argc, char** argv);

// The command isolated scenarios run: the program and its first arguments, to which the runner
// appends `__scenario FILE ...`. Empty (the default): this very binary. The Python front sets
// {sys.executable, "-m", "graphcheck"}, so that its children import the same models.
void set_child_command(std::vector<std::string> command);
[[nodiscard]] std::vector<std::string> child_command();

}  // namespace graphcheck
