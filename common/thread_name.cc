#include "common/thread_name.h"

#include <pthread.h>

namespace tpserve {

void NameThisThread(const char* name) { pthread_setname_np(pthread_self(), name); }

}  // namespace tpserve
