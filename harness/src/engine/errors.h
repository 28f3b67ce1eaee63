#pragma once
// How the engine sorts what goes wrong (UserError: Status::error; ModelFailure: a failed check)
// and call_model(), the one wrapper around model code; with the small scope guards of the
// engine's files (FlagScope, HarnessTime). Internal to the driver (harness/src/engine/).

#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <chrono>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

#include "graphcheck/engine/backend.h"
#include "graphcheck/config.h"
#include "graphcheck/model.h"
#include "graphcheck/probe.h"
#include "graphcheck/safetensors.h"

namespace graphcheck::engine {

using Clock = std::chrono::steady_clock;

// A user error (bad config, checkpoint, backend): Status::error, exit 2.
class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Model code threw, or the forward cannot be captured: a failed check, exit 1.
class ModelFailure : public std::runtime_error {
 public:
  ModelFailure(Phase phase, std::string message)
      : std::runtime_error(std::move(message)), m_phase(phase) {}
  [[nodiscard]] Phase phase() const { return m_phase; }

 private:
  Phase m_phase;
};

inline std::string what_of(const std::exception& e) {
  if (auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

// Runs model code; sorts its exceptions into user errors and model failures.
template <class Fn>
auto call_model(Phase phase, const std::string& what, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const ModelFailure&) {
    throw;
  } catch (const UserError&) {
    throw;
  } catch (const CheckpointMismatch& e) {
    throw UserError(e.what());
  } catch (const ConfigError& e) {
    throw UserError(e.what());
  } catch (const safetensors::Error& e) {
    throw UserError(e.what());
  } catch (const NotCapturable& e) {
    throw ModelFailure(phase, fmt::format("{}: not capturable: {}", what, e.what()));
  } catch (const BackendLimit& e) {
    throw UserError(fmt::format("{}: {}", what, e.what()));
  } catch (const std::exception& e) {
    throw ModelFailure(phase, fmt::format("{} threw: {}", what, what_of(e)));
  } catch (...) {
    throw ModelFailure(phase, fmt::format("{} threw an exception not derived from std::exception",
                                          what));
  }
}

// Sets a flag for its lifetime and restores the previous value.
class FlagScope {
 public:
  explicit FlagScope(bool& flag) : m_flag(flag), m_previous(flag) { m_flag = true; }
  ~FlagScope() { m_flag = m_previous; }
  FlagScope(const FlagScope&) = delete;
  FlagScope& operator=(const FlagScope&) = delete;

 private:
  bool& m_flag;
  bool m_previous;
};

// Adds the time it lives to a counter: the harness's own work inside a phase window, which the
// window's timing leaves out.
class HarnessTime {
 public:
  explicit HarnessTime(double& seconds) : m_seconds(seconds), m_start(Clock::now()) {}
  ~HarnessTime() { m_seconds += std::chrono::duration<double>(Clock::now() - m_start).count(); }
  HarnessTime(const HarnessTime&) = delete;
  HarnessTime& operator=(const HarnessTime&) = delete;

 private:
  double& m_seconds;
  Clock::time_point m_start;
};

}  // namespace graphcheck::engine
