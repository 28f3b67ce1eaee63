#pragma once
// A GoogleTest fixture that gives each test its own empty directory below the system temp
// directory, removed afterwards.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string>

namespace graphcheck::testing {

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    m_dir = std::filesystem::temp_directory_path() /
            ("graphcheck_test_" + std::to_string(::getpid()) + "_" +
             sanitized(info->test_suite_name()) + "_" + sanitized(info->name()));
    std::filesystem::remove_all(m_dir);
    std::filesystem::create_directories(m_dir);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(m_dir, ec);
  }
  [[nodiscard]] std::string path_of(const std::string& relative) const {
    return (m_dir / relative).string();
  }

  // A file name safe for any test name (parameterized names hold '/').
  static std::string sanitized(std::string name) {
    std::replace_if(
        name.begin(), name.end(),
        [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
    return name;
  }

  std::filesystem::path m_dir;
};

}  // namespace graphcheck::testing
