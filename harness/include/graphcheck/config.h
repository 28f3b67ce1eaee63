#pragma once
// A fixture's configuration: the `model: {config: {...}}` map of a scenario file. Torch-free.

#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace graphcheck {

// A user error in a model's configuration (unknown key, wrong type, value out of range).
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ModelConfig {
 public:
  using Value = std::variant<bool, std::int64_t, double, std::string>;

  // `where` is a source location ("file.yaml:7:12") used in error messages.
  void set(const std::string& key, Value value, std::string where = {});

  // Typed getters: return the default when the key is absent, throw ConfigError when the value
  // has the wrong type or (for the ranged overloads) lies outside [min, max]. Every key read is
  // marked used; the driver rejects keys nobody read (misspellings).
  [[nodiscard]] std::int64_t get_int(const std::string& key, std::int64_t fallback) const;
  [[nodiscard]] std::int64_t get_int(const std::string& key, std::int64_t fallback,
                                     std::int64_t min, std::int64_t max) const;
  [[nodiscard]] double get_double(const std::string& key, double fallback) const;
  [[nodiscard]] bool get_bool(const std::string& key, bool fallback) const;
  [[nodiscard]] std::string get_string(const std::string& key, const std::string& fallback) const;

  [[nodiscard]] std::vector<std::string> unused_keys() const;
  // Every key a getter asked for, with the default it offered, in the order first asked: what
  // `graphcheck list` shows of a fixture constructed with an empty config.
  [[nodiscard]] const std::vector<std::pair<std::string, Value>>& defaults_asked() const { return m_defaults; }
  [[nodiscard]] std::string where(const std::string& key) const;
  [[nodiscard]] const std::map<std::string, Value>& values() const { return m_values; }

 private:
  [[nodiscard]] const Value* lookup(const std::string& key, Value fallback) const;

  std::map<std::string, Value> m_values;
  std::map<std::string, std::string> m_where;
  mutable std::set<std::string> m_used;
  mutable std::vector<std::pair<std::string, Value>> m_defaults;
};

[[nodiscard]] std::string to_string(const ModelConfig::Value& value);

}  // namespace graphcheck
