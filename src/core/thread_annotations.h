// Clang's thread-safety annotations (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html), so
// that the lock discipline written here is checked by `-Wthread-safety` (the CI job
// scripts/thread-safety) instead of stated in comments. They expand to nothing on other compilers.
// Internal to the library: no public header includes this.
#pragma once

#if defined(__clang__)
#define CONVPLAN_TSA_(x) __attribute__((x))
#else
#define CONVPLAN_TSA_(x)
#endif

#define CAPABILITY(x) CONVPLAN_TSA_(capability(x))
#define SCOPED_CAPABILITY CONVPLAN_TSA_(scoped_lockable)
#define GUARDED_BY(x) CONVPLAN_TSA_(guarded_by(x))
#define PT_GUARDED_BY(x) CONVPLAN_TSA_(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) CONVPLAN_TSA_(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) CONVPLAN_TSA_(acquired_after(__VA_ARGS__))
#define REQUIRES(...) CONVPLAN_TSA_(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) CONVPLAN_TSA_(requires_shared_capability(__VA_ARGS__))
#define ACQUIRE(...) CONVPLAN_TSA_(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) CONVPLAN_TSA_(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) CONVPLAN_TSA_(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) CONVPLAN_TSA_(release_shared_capability(__VA_ARGS__))
#define RELEASE_GENERIC(...) CONVPLAN_TSA_(release_generic_capability(__VA_ARGS__))
#define EXCLUDES(...) CONVPLAN_TSA_(locks_excluded(__VA_ARGS__))
#define RETURN_CAPABILITY(x) CONVPLAN_TSA_(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS CONVPLAN_TSA_(no_thread_safety_analysis)
