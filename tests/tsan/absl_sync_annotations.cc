// Linked into ThreadSanitizer builds of the test programs only
// (tests/CMakeLists.txt, scripts/check/sanitize.sh).
//
// TSan knows of the synchronisation it instruments or intercepts: atomics in
// instrumented code, pthread mutexes and condition variables. Debian's
// Abseil is built without TSan, and absl::Mutex and absl::CondVar block on
// futexes inside libabsl_synchronization, so to TSan they synchronise
// nothing: every access they guard would be reported as a race. This file
// defines the entry points the project calls, so that they interpose on the
// library's, and tells TSan the happens-before edges each one makes before
// calling the library's own: a lock acquires the mutex's clock, an unlock
// releases it, and a wait releases it on the way in and acquires it on the
// way out (a wait unlocks and relocks inside the library). Lock order and
// double locking are not checked this way (nor by Abseil's deadlock
// detection, off below); clang's -Wthread-safety is the check for those
// (scripts/check/check_thread_safety.sh).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);

namespace {

#define ATTN_STR2(x) #x
#define ATTN_STR(x) ATTN_STR2(x)
// "_ZN4absl<n><inline namespace>" + the rest of a mangled name ("_ZNK..."
// for a const member function).
std::string Mangled(const char* rest, bool const_member) {
  const std::string ns = ATTN_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  return std::string(const_member ? "_ZNK4absl" : "_ZN4absl") + std::to_string(ns.size()) + ns +
         rest;
}

// The library's definition of the function whose mangled name ends `rest`.
template <typename Fn>
Fn Real(const char* rest, bool const_member = false) {
  const std::string name = Mangled(rest, const_member);
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "absl_sync_annotations: %s not found in Abseil\n", name.c_str());
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

void Acquire(const void* addr) { __tsan_acquire(const_cast<void*>(addr)); }
void Release(const void* addr) { __tsan_release(const_cast<void*>(addr)); }

using absl::Condition;
using absl::CondVar;
using absl::Mutex;

// The library evaluates a waiter's condition while holding the mutex, from
// inside the wait or in the thread that unlocks. The evaluation acquires the
// mutex's clock first, as what it reads was written under the lock, and
// releases it after, so the waiter, once it returns, is ordered after those
// reads. Its own reads of this struct (on the waiter's stack) are left
// uninstrumented: they come before the acquire by construction.
struct AnnotatedCondition {
  const Condition* condition;
  const Mutex* mu;

  __attribute__((no_sanitize_thread)) static bool Eval(void* self) {
    const auto* annotated = static_cast<const AnnotatedCondition*>(self);
    const Condition* condition = annotated->condition;
    const Mutex* mu = annotated->mu;
    Acquire(mu);
    const bool met = condition->Eval();
    Release(mu);
    return met;
  }
  Condition Wrapped() { return Condition(&AnnotatedCondition::Eval, static_cast<void*>(this)); }
};

// Abseil's lock-order graph (its deadlock detection, on in Debian's build)
// is guarded by a spinlock TSan cannot see either, so gRPC's threads updating
// it look like racing; TSan builds turn the detection off before main.
const bool kDeadlockGraphOff = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}();

}  // namespace

void Mutex::Lock() {
  static auto real = Real<void (*)(Mutex*)>("5Mutex4LockEv");
  real(this);
  Acquire(this);
}

bool Mutex::TryLock() {
  static auto real = Real<bool (*)(Mutex*)>("5Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) Acquire(this);
  return locked;
}

void Mutex::Unlock() {
  static auto real = Real<void (*)(Mutex*)>("5Mutex6UnlockEv");
  Release(this);
  real(this);
}

void Mutex::ReaderLock() {
  static auto real = Real<void (*)(Mutex*)>("5Mutex10ReaderLockEv");
  real(this);
  Acquire(this);
}

void Mutex::ReaderUnlock() {
  static auto real = Real<void (*)(Mutex*)>("5Mutex12ReaderUnlockEv");
  Release(this);
  real(this);
}

void Mutex::LockWhen(const Condition& cond) {
  static auto real = Real<void (*)(Mutex*, const Condition&)>("5Mutex8LockWhenERKNS0_9ConditionE");
  AnnotatedCondition annotated{&cond, this};
  real(this, annotated.Wrapped());
  Acquire(this);
}

void Mutex::Await(const Condition& cond) {
  static auto real = Real<void (*)(Mutex*, const Condition&)>("5Mutex5AwaitERKNS0_9ConditionE");
  AnnotatedCondition annotated{&cond, this};
  Release(this);
  real(this, annotated.Wrapped());
  Acquire(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, absl::Duration)>(
      "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  AnnotatedCondition annotated{&cond, this};
  Release(this);
  const bool met = real(this, annotated.Wrapped(), timeout);
  Acquire(this);
  return met;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, absl::Time deadline) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, absl::Time)>(
      "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  AnnotatedCondition annotated{&cond, this};
  Release(this);
  const bool met = real(this, annotated.Wrapped(), deadline);
  Acquire(this);
  return met;
}

void CondVar::Wait(Mutex* mu) {
  static auto real = Real<void (*)(CondVar*, Mutex*)>("7CondVar4WaitEPNS0_5MutexE");
  Release(mu);
  real(this, mu);
  Acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
  static auto real = Real<bool (*)(CondVar*, Mutex*, absl::Duration)>(
      "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  Release(mu);
  const bool timed_out = real(this, mu, timeout);
  Acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline) {
  static auto real = Real<bool (*)(CondVar*, Mutex*, absl::Time)>(
      "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Release(mu);
  const bool timed_out = real(this, mu, deadline);
  Acquire(mu);
  return timed_out;
}

// A notification's flag is an atomic inside the library: Notify releases,
// and whoever sees it set acquires.
void absl::Notification::Notify() {
  static auto real = Real<void (*)(Notification*)>("12Notification6NotifyEv");
  Release(this);
  real(this);
}

void absl::Notification::WaitForNotification() const {
  static auto real =
      Real<void (*)(const Notification*)>("12Notification19WaitForNotificationEv", true);
  real(this);
  Acquire(this);
}

bool absl::Notification::WaitForNotificationWithTimeout(absl::Duration timeout) const {
  static auto real = Real<bool (*)(const Notification*, absl::Duration)>(
      "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE", true);
  const bool notified = real(this, timeout);
  if (notified) Acquire(this);
  return notified;
}
