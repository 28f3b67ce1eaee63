// The whole graphcheck CLI, with this project's models linked in.

#include <graphcheck/cli.h>

int main(int argc, char** argv) { return graphcheck::cli_main(argc, argv); }
