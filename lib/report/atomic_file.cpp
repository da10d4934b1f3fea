// write_file_atomic: readers of `path` see the old content or the new one, never a prefix.
// The temp file lives in the target's folder, so rename() stays within one file system
// and is atomic.
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <string>
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

// The temp file being written, for the signal handler below: an interrupted run (Ctrl-C in a
// sweep, a job's time limit) leaves no hidden half-written file beside its results. One write
// at a time holds it; the handler only reads it (unlink is async-signal-safe).
char g_pending[4096];
volatile std::sig_atomic_t g_has_pending = 0;

extern "C" void remove_pending_and_reraise(int sig) {
  if (g_has_pending) ::unlink(g_pending);
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

// Closes and removes the temp file unless committed; never throws.
struct TempFile {
  std::string path;
  int fd = -1;
  bool committed = false;
  void hold(const char* p) {
    path = p;
    if (path.size() < sizeof(g_pending)) {
      std::memcpy(g_pending, path.c_str(), path.size() + 1);
      g_has_pending = 1;
    }
  }
  ~TempFile() {
    g_has_pending = 0;
    if (fd >= 0) ::close(fd);
    if (!committed && !path.empty()) ::unlink(path.c_str());
  }
};

}  // namespace

void write_file_atomic(const std::string& path, const std::string& content) {
  namespace fs = std::filesystem;
  if (path.empty()) throw RuntimeError("cannot write an empty path");
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");

  install_signal_cleanup();
  TempFile tmp;
  std::string leaf = ".";  // hidden, so a folder listing does not show half-written results
  leaf += target.filename().string();
  leaf += ".tmp.XXXXXX";
  const std::string templ = (dir / leaf).string();
  std::vector<char> name(templ.begin(), templ.end());
  name.push_back('\0');
  g_has_pending = 0;
  tmp.fd = ::mkstemp(name.data());
  if (tmp.fd < 0) fail(path, "cannot create a temp file in its folder", errno);
  tmp.hold(name.data());

  // mkstemp creates 0600; results are meant to be shared: keep an existing file's mode, or 0644.
  struct stat st {};
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
  if (::rename(tmp.path.c_str(), path.c_str()) != 0) fail(path, "rename", errno);
  tmp.committed = true;

  // Make the rename itself durable; best effort (some file systems refuse fsync on a folder).
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace attn
