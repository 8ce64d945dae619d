// CONVPLAN_EXPORT: marks the declarations of the public API that libconvplan.so exports. The
// library is built with hidden visibility (-fvisibility=hidden), so a public class or function
// without it links against the static library but not against the shared one; CI builds the
// examples/ consumer against both. Internals (src/) are never marked.
#pragma once

// The standard attribute form: it may follow [[nodiscard]] (class [[nodiscard]] CONVPLAN_EXPORT
// Status), where GCC rejects __attribute__.
#if defined(__GNUC__) || defined(__clang__)
#define CONVPLAN_EXPORT [[gnu::visibility("default")]]
#else
#define CONVPLAN_EXPORT
#endif
