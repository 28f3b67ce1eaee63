#pragma once
// Moved to graphcheck/engine/compare.h, with the rest of the engine API; this path stays for code
// written against earlier releases.
#include "graphcheck/engine/compare.h"
