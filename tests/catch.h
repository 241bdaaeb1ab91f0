// One include for Catch2 v2 (Debian 12) and v3 (Ubuntu 24.04); FPG_CATCH_V3 is set by CMake.
#pragma once

#if defined(FPG_CATCH_V3)
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
using Catch::Approx;
#else
#include <catch2/catch.hpp>
#endif
