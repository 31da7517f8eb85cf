// Which sanitizer instruments this build, for tests whose bounds depend on
// it (resident memory under AddressSanitizer). Depends on nothing.
#ifndef RANKD_TESTS_HARNESS_SANITIZERS_H_
#define RANKD_TESTS_HARNESS_SANITIZERS_H_

namespace rankd::testing {

// True under --config=asan (clang's AddressSanitizer): it pads every
// allocation, keeps freed memory in its quarantine (up to 256 MiB by
// default) and gives memory back to the system in whole regions only, so
// what a process holds after a burst is far above an uninstrumented
// build's.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#elif defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif

}  // namespace rankd::testing

#endif  // RANKD_TESTS_HARNESS_SANITIZERS_H_
