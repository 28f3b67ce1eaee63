// A shared library that registers nothing (what is left of a plugin whose registering objects a
// static archive dropped): loading it must fail with exit 2 and say why.

extern "C" int graphcheck_empty_plugin_marker() { return 42; }
