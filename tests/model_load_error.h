// Loading a bad model file must fail with a kestrel::Error that names the file and says what is
// wrong (shared by the model-loading tests).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "model/model.h"

namespace kestrel::test {

inline void expect_load_error(const std::string& path, const std::vector<std::string>& phrases,
                              const ShardRequest& shard = {}) {
  try {
    Model::load(path, shard);
    FAIL() << "loaded " << path;
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos) << "error must name the file: " << message;
    for (const auto& phrase : phrases) {
      EXPECT_NE(message.find(phrase), std::string::npos) << "missing '" << phrase << "' in: " << message;
    }
  }
}

}  // namespace kestrel::test
