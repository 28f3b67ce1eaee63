#include "graphcheck/config.h"

#include <fmt/format.h>

namespace graphcheck {
namespace {

const char* type_name(const ModelConfig::Value& value) {
  switch (value.index()) {
    case 0: return "a boolean";
    case 1: return "an integer";
    case 2: return "a number";
    default: return "a string";
  }
}

}  // namespace

std::string to_string(const ModelConfig::Value& value) {
  if (auto* b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  if (auto* i = std::get_if<std::int64_t>(&value)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&value)) {
    std::string text = fmt::format("{}", *d);
    // Keep a whole-number double recognisable as a number with a fraction: "2.0", not "2".
    if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
    return text;
  }
  return std::get<std::string>(value);
}

void ModelConfig::set(const std::string& key, Value value, std::string where) {
  m_values[key] = std::move(value);
  m_where[key] = std::move(where);
}

const ModelConfig::Value* ModelConfig::lookup(const std::string& key, Value fallback) const {
  if (m_used.insert(key).second) m_defaults.emplace_back(key, std::move(fallback));
  auto it = m_values.find(key);
  return it == m_values.end() ? nullptr : &it->second;
}

std::string ModelConfig::where(const std::string& key) const {
  auto it = m_where.find(key);
  return it == m_where.end() || it->second.empty() ? std::string("config") : it->second;
}

std::int64_t ModelConfig::get_int(const std::string& key, std::int64_t fallback) const {
  const Value* value = lookup(key, fallback);
  if (!value) return fallback;
  if (auto* i = std::get_if<std::int64_t>(value)) return *i;
  throw ConfigError(fmt::format("{}: config key '{}' must be an integer, got {} ('{}')",
                                where(key), key, type_name(*value), to_string(*value)));
}

std::int64_t ModelConfig::get_int(const std::string& key, std::int64_t fallback, std::int64_t min,
                                  std::int64_t max) const {
  std::int64_t v = get_int(key, fallback);
  if (v < min || v > max) {
    throw ConfigError(fmt::format("{}: config key '{}' = {} is out of range: use a value in [{}, {}]",
                                  where(key), key, v, min, max));
  }
  return v;
}

double ModelConfig::get_double(const std::string& key, double fallback) const {
  const Value* value = lookup(key, fallback);
  if (!value) return fallback;
  if (auto* d = std::get_if<double>(value)) return *d;
  if (auto* i = std::get_if<std::int64_t>(value)) return static_cast<double>(*i);
  throw ConfigError(fmt::format("{}: config key '{}' must be a number, got {} ('{}')", where(key),
                                key, type_name(*value), to_string(*value)));
}

bool ModelConfig::get_bool(const std::string& key, bool fallback) const {
  const Value* value = lookup(key, fallback);
  if (!value) return fallback;
  if (auto* b = std::get_if<bool>(value)) return *b;
  throw ConfigError(fmt::format("{}: config key '{}' must be true or false, got {} ('{}')",
                                where(key), key, type_name(*value), to_string(*value)));
}

std::string ModelConfig::get_string(const std::string& key, const std::string& fallback) const {
  const Value* value = lookup(key, fallback);
  if (!value) return fallback;
  if (auto* s = std::get_if<std::string>(value)) return *s;
  throw ConfigError(fmt::format("{}: config key '{}' must be a string, got {} ('{}')", where(key),
                                key, type_name(*value), to_string(*value)));
}

std::vector<std::string> ModelConfig::unused_keys() const {
  std::vector<std::string> keys;
  for (const auto& [key, value] : m_values) {
    if (!m_used.count(key)) keys.push_back(key);
  }
  return keys;
}

}  // namespace graphcheck
