// Names the calling thread as `top -H`, `ps -L`, perf and gdb show it: one name per role
// ("tp-engine", "tp-http-io"), so an operator can see which part of a process takes the CPU.
#pragma once

namespace tpserve {

// `name`: at most 15 characters (Linux keeps no more).
void NameThisThread(const char* name);

}  // namespace tpserve
