// CPU threading: OpenMP for gradus's loops and OpenBLAS (its OpenMP build shares the same pool).
#pragma once

namespace gradus {

void set_num_threads(int n);  // n >= 1; throws ValueError otherwise
int get_num_threads();

}  // namespace gradus
