// Counts and sizes as the command line prints them: "1 file", "2 files"; bytes in the unit that
// keeps the figure readable (B below 1 kB, then kB, MB and, from 1000 MB on, GB; decimal units).
#pragma once

#include <cstdint>
#include <string>

namespace fpg {

// "1 file", "0 files", "3 files"; `many` defaults to `one` + "s".
std::string plural(uint64_t n, const std::string& one, const std::string& many = "");

// "512 B", "12.3 kB", "4.20 MB", "1.52 GB".
std::string byte_size(uint64_t bytes);

}  // namespace fpg
