// main.cpp — GoogleTest entry point that owns the embedded Python interpreter for all C++ suites.
#include <gtest/gtest.h>
#include <pybind11/embed.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  pybind11::scoped_interpreter guard{};
  return RUN_ALL_TESTS();
}
