// tests/cpu/cpu_util.hpp — small helpers for the CPU suite.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "../scoped_env.hpp"
#include "tilewire/runtime/errors.hpp"

namespace tw_test {

// EXPECT_TRUE(contains(text, "needle")) prints the text when the needle is missing.
inline ::testing::AssertionResult contains(const std::string& text, const std::string& needle) {
  if (text.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << needle << "\" not found in:\n" << text;
}

// Runs f(), expecting a tw::Error; returns it (code and message) for further checks.
template <class F>
tw::Error catch_tw(F&& f) {
  try {
    f();
  } catch (const tw::Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a tw::Error";
  return tw::Error(tw::Errc::kState, "<nothing thrown>");
}

}  // namespace tw_test
