#pragma once
// Moved to graphcheck/engine/scenario.h, with the rest of the engine API; this path stays for code
// written against earlier releases.
#include "graphcheck/engine/scenario.h"
