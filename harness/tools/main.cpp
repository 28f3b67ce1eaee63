// The stock graphcheck executable: the CLI with the fixtures of this repository linked in.

#include "graphcheck/cli.h"

int main(int argc, char** argv) { return graphcheck::cli_main(argc, argv); }
