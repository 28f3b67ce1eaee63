#pragma once
// What the Markdown, HTML and trace reporters derive from a record: per-phase time, the memory
// series, the span tree, number formats. Torch-free; private to the reporters.

#include <cstdint>
#include <string>
#include <vector>

#include "graphcheck/engine/record.h"

namespace graphcheck::report {

// Model time per lifecycle phase in the observe pass (gc/timing/<phase>), summed over cycles and
// batch sizes, in the order the phases first ran.
struct PhaseTime {
  std::string phase;
  double seconds = 0;
  int windows = 0;  // how many phase windows the sum covers
};
[[nodiscard]] std::vector<PhaseTime> phase_times(const ScenarioRecord& record);

// Memory after each phase window of the observe pass (gc/memory/<phase>/{live,peak}_bytes), in
// the order the windows ended.
struct MemoryPoint {
  std::string phase;
  int cycle = 0;
  std::int64_t batch_size = 0;
  double live_bytes = 0;
  double peak_bytes = 0;
  [[nodiscard]] std::string label() const;  // "capture b=4 (refit 1)"
};
[[nodiscard]] std::vector<MemoryPoint> memory_series(const ScenarioRecord& record);

// A span and how deep it nests inside its pass (0: the pass itself).
struct SpanRow {
  const Span* span = nullptr;
  int depth = 0;
};
[[nodiscard]] std::vector<SpanRow> span_rows(const ScenarioRecord& record);

// The span whose window a finding was made in (same pass, phase, cycle, batch size), else its
// pass's span, else null.
[[nodiscard]] const Span* span_of(const ScenarioRecord& record, const Finding& finding);

// Whether a record needs a reader's eye: it did not pass, and (in a mutants run, where a mutated
// run is meant to fail) it is a clean run or a mutation a declared probe missed.
[[nodiscard]] bool unexpected(const RunRecord& run, const ScenarioRecord& record);

// Text for XML and HTML, attribute values included: & < > " ' escaped, control characters that
// XML 1.0 forbids become spaces.
[[nodiscard]] std::string markup_escape(const std::string& text);
// A Markdown table cell on one line: pipes escaped, newlines spaces; `html`: < and > defused too
// (not inside a code span, which shows entities as they are).
[[nodiscard]] std::string markdown_cell(const std::string& text, bool html = true);

// The text with every byte sequence that is not UTF-8 (binary output, a character cut in two)
// replaced by U+FFFD, so that XML and HTML reports stay well formed.
[[nodiscard]] std::string utf8_clean(const std::string& text);

// The findings a cause groups besides its primary, counted per probe: "address ×5, coverage ×12"
// ("" when there are none).
[[nodiscard]] std::string corroboration(const ScenarioRecord& record, const Cause& cause);
// "in cycle 2", "at the initial load (cycle 0)": where a cause was first seen.
[[nodiscard]] std::string first_seen(const Cause& cause);
// "1 cause" / "3 causes" (of N findings).
[[nodiscard]] std::string causes_heading(const ScenarioRecord& record);

// "1.23 s", "45.6 ms", "789 µs".
[[nodiscard]] std::string format_seconds(double seconds);
// "512 B", "1.5 KiB", "2.00 GiB".
[[nodiscard]] std::string format_bytes(double bytes);
// "llama-checkpoint" or "llama-checkpoint [llama.drop_v_shard_on_refit]".
[[nodiscard]] std::string display_name(const ScenarioRecord& record);
// "phase pwal, cycle 1, batch 4" (the parts that apply).
[[nodiscard]] std::string where(const Finding& finding);
// The kill-matrix cell as a reader sees it: "KILLED (census)", "MISSED", "(observe)", "".
[[nodiscard]] std::string cell_text(const std::string& cell);
// A status as one word with a symbol, for Markdown: "✅ passed".
[[nodiscard]] std::string status_badge(Status status);

}  // namespace graphcheck::report
