// write_file_atomic: readers of `path` see the old content or the new one, never a prefix.
// The temp file lives in the target's folder, so rename() stays within one file system
// and is atomic. write_files_atomic does the same for a set of outputs, all or none.
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.hpp"
#include "report/results.hpp"

namespace attn {

namespace {

[[noreturn]] void fail(const std::string& path, const char* what, int err) {
  throw RuntimeError("cannot write " + path + ": " + what + ": " + std::strerror(err));
}

// The temp files being written, for the signal handler below: an interrupted run (Ctrl-C in a
// sweep, a job's time limit) leaves no hidden half-written file beside its results. Each write
// holds a slot while its temp file exists (write_files_atomic holds one per output until they are
// all renamed); the handler only reads them (unlink is async-signal-safe).
constexpr int kPendingSlots = 16;
char g_pending[kPendingSlots][4096];
volatile std::sig_atomic_t g_has_pending[kPendingSlots] = {};

extern "C" void remove_pending_and_reraise(int sig) {
  for (int i = 0; i < kPendingSlots; ++i)
    if (g_has_pending[i]) ::unlink(g_pending[i]);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void install_signal_cleanup() {
  static const bool installed = [] {
    for (int sig : {SIGINT, SIGTERM, SIGHUP})
      if (std::signal(sig, SIG_IGN) != SIG_IGN) std::signal(sig, remove_pending_and_reraise);  // keep an ignored one
    return true;
  }();
  (void)installed;
}

// A temp file beside its target; closed and removed unless committed; never throws. Movable, so
// that several can be held (and all removed when one of them fails).
struct TempFile {
  std::string path;
  int fd = -1;
  int slot = -1;  // its g_pending slot; -1: none (all taken, or the path too long)
  bool committed = false;
  TempFile() = default;
  TempFile(TempFile&& o) noexcept : path(std::move(o.path)), fd(o.fd), slot(o.slot), committed(o.committed) {
    o.path.clear();
    o.fd = -1;
    o.slot = -1;
  }
  TempFile& operator=(TempFile&&) = delete;
  void hold(const char* p) {
    path = p;
    if (path.size() >= sizeof(g_pending[0])) return;
    for (int i = 0; i < kPendingSlots; ++i) {
      if (g_has_pending[i]) continue;
      std::memcpy(g_pending[i], path.c_str(), path.size() + 1);
      g_has_pending[i] = 1;
      slot = i;
      return;
    }
  }
  void release_slot() {
    if (slot >= 0) g_has_pending[slot] = 0;
    slot = -1;
  }
  ~TempFile() {
    release_slot();
    if (fd >= 0) ::close(fd);
    if (!committed && !path.empty()) ::unlink(path.c_str());
  }
};

std::filesystem::path folder_of(const std::string& path) {
  const std::filesystem::path target(path);
  return target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
}

// `content` in full in a synced temp file beside `path`, not yet renamed over it.
TempFile prepare(const std::string& path, const std::string& content) {
  namespace fs = std::filesystem;
  if (path.empty()) throw RuntimeError("cannot write an empty path");
  const fs::path target(path);
  const fs::path dir = folder_of(path);
  // rename() would refuse a folder only after the other files of a set were renamed: refuse it
  // here, while nothing is replaced yet.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) fail(path, "it is a folder", EISDIR);

  install_signal_cleanup();
  TempFile tmp;
  std::string leaf = ".";  // hidden, so a folder listing does not show half-written results
  leaf += target.filename().string();
  leaf += ".tmp.XXXXXX";
  const std::string templ = (dir / leaf).string();
  std::vector<char> name(templ.begin(), templ.end());
  name.push_back('\0');
  tmp.fd = ::mkstemp(name.data());
  if (tmp.fd < 0) fail(path, "cannot create a temp file in its folder", errno);
  tmp.hold(name.data());

  // mkstemp creates 0600; results are meant to be shared: keep an existing file's mode, or 0644.
  const mode_t mode = ::stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0644;
  if (::fchmod(tmp.fd, mode) != 0) fail(path, "fchmod", errno);

  const char* p = content.data();
  size_t left = content.size();
  while (left > 0) {
    const ssize_t n = ::write(tmp.fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(path, "write", errno);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(tmp.fd) != 0) fail(path, "fsync", errno);
  const int fd = tmp.fd;
  tmp.fd = -1;
  if (::close(fd) != 0) fail(path, "close", errno);
  return tmp;
}

void commit(TempFile& tmp, const std::string& path) {
  if (::rename(tmp.path.c_str(), path.c_str()) != 0) fail(path, "rename", errno);
  tmp.committed = true;
  tmp.release_slot();

  // Make the rename itself durable; best effort (some file systems refuse fsync on a folder).
  const int dfd = ::open(folder_of(path).c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& content) {
  TempFile tmp = prepare(path, content);
  commit(tmp, path);
}

void write_files_atomic(const std::vector<std::pair<std::string, std::string>>& files) {
  // Every temp file first: one that cannot be written (a full disk, a folder the permissions
  // refuse) throws before any target is replaced, and the destructors remove the others.
  std::vector<TempFile> temps;
  temps.reserve(files.size());
  for (const auto& [path, content] : files) temps.push_back(prepare(path, content));
  for (size_t i = 0; i < files.size(); ++i) commit(temps[i], files[i].first);
}

}  // namespace attn
