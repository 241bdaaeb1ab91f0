// Test runner entry point for Catch2 v2; v3 links Catch2::Catch2WithMain instead.
#if !defined(FPG_CATCH_V3)
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#endif
