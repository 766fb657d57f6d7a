#include "support/test_pki.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <memory>
#include <string_view>
#include <system_error>
#include <utility>

namespace segstore::testing {
namespace {

// unique_ptr deleter calling OpenSSL's free function `Free`.
template <auto Free>
struct OpenSslDeleter {
  template <typename T>
  void operator()(T* p) const {
    Free(p);
  }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, OpenSslDeleter<EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, OpenSslDeleter<X509_free>>;
using ExtensionPtr = std::unique_ptr<X509_EXTENSION, OpenSslDeleter<X509_EXTENSION_free>>;
using BignumPtr = std::unique_ptr<BIGNUM, OpenSslDeleter<BN_free>>;
using BioPtr = std::unique_ptr<BIO, OpenSslDeleter<BIO_free_all>>;

constexpr long kHour = 60 * 60;
constexpr long kDay = 24 * kHour;
constexpr int kSerialBits = 128;

// Owns a file descriptor; closes it (ignoring errors) unless released.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Internal, saying `what` failed, followed by (and draining) every error on
// this thread's OpenSSL error queue.
Status OpenSslError(std::string_view what) {
  std::string msg(what);
  bool any = false;
  const char* data = nullptr;
  int flags = 0;
  while (unsigned long code = ERR_get_error_all(nullptr, nullptr, nullptr, &data, &flags)) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof(buf));
    msg += any ? "; " : ": ";
    msg += buf;
    if ((flags & ERR_TXT_STRING) != 0 && data != nullptr && *data != '\0') {
      msg += " (";
      msg += data;
      msg += ")";
    }
    any = true;
  }
  if (!any) msg += ": (no OpenSSL error queued)";
  return Status::Internal(msg);
}

Status IoError(const std::string& path, std::string_view what, int err) {
  return Status::IOError(path + ": " + std::string(what) + ": " +
                         std::error_code(err, std::generic_category()).message());
}

// Writes `bytes` to `path` with permissions exactly `mode` (whatever the umask
// or an earlier file of that name had), replacing any such file's contents.
Status WriteFile(const std::string& path, std::string_view bytes, mode_t mode) {
  FileDescriptor fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
  if (fd.get() < 0) return IoError(path, "open", errno);
  if (::fchmod(fd.get(), mode) != 0) return IoError(path, "fchmod", errno);
  while (!bytes.empty()) {
    ssize_t n = ::write(fd.get(), bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError(path, "write", errno);
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  if (::close(fd.release()) != 0) return IoError(path, "close", errno);
  return Status::OK();
}

// Writes what `write_pem` puts into a memory BIO to `path` (see WriteFile).
template <typename WritePem>
Status WritePemFile(const std::string& path, mode_t mode, WritePem write_pem) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr) return OpenSslError("BIO_new");
  if (write_pem(bio.get()) != 1) return OpenSslError("PEM encoding for " + path);
  char* data = nullptr;
  long len = BIO_get_mem_data(bio.get(), &data);
  if (len <= 0 || data == nullptr) return OpenSslError("BIO_get_mem_data for " + path);
  return WriteFile(path, std::string_view(data, static_cast<size_t>(len)), mode);
}

Status WriteCert(const std::string& path, X509* cert) {
  return WritePemFile(path, 0644, [cert](BIO* bio) { return PEM_write_bio_X509(bio, cert); });
}

// Unencrypted PKCS#8 ("BEGIN PRIVATE KEY"), readable by the owner only.
Status WriteKey(const std::string& path, EVP_PKEY* key) {
  return WritePemFile(path, 0600, [key](BIO* bio) {
    return PEM_write_bio_PKCS8PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  });
}

Result<PkeyPtr> GenerateKey() {
  PkeyPtr key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
  if (key == nullptr) return OpenSslError("generating a P-256 key");
  return key;
}

enum class CertKind { kCa, kServer, kClient };

struct CertSpec {
  CertKind kind;
  const char* common_name;
  long not_before = -kHour;            // seconds from now
  long not_after = -kHour + 2 * kDay;  // seconds from now
};

// Adds extension `nid` with value `value` (openssl.cnf syntax) to `cert`.
// `ctx` names the issuer and subject for the key identifier extensions.
Status AddExtension(X509* cert, X509V3_CTX* ctx, int nid, const char* value) {
  ExtensionPtr ext(X509V3_EXT_nconf_nid(nullptr, ctx, nid, value));
  if (ext == nullptr) return OpenSslError(std::string("building extension ") + OBJ_nid2sn(nid));
  if (X509_add_ext(cert, ext.get(), -1) != 1) {
    return OpenSslError(std::string("adding extension ") + OBJ_nid2sn(nid));
  }
  return Status::OK();
}

// A certificate for `key` as `spec` says, signed by `issuer_key` on behalf of
// `issuer_cert`; self-signed by `key` when `issuer_cert` is null.
Result<X509Ptr> MakeCert(const CertSpec& spec, EVP_PKEY* key, X509* issuer_cert,
                         EVP_PKEY* issuer_key) {
  X509Ptr cert(X509_new());
  if (cert == nullptr) return OpenSslError("X509_new");
  X509* x = cert.get();
  if (issuer_cert == nullptr) {
    issuer_cert = x;
    issuer_key = key;
  }
  if (X509_set_version(x, X509_VERSION_3) != 1) return OpenSslError("X509_set_version");

  BignumPtr serial(BN_new());
  if (serial == nullptr ||
      BN_rand(serial.get(), kSerialBits, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1) {
    return OpenSslError("generating a serial number");
  }
  if (BN_is_zero(serial.get()) && BN_one(serial.get()) != 1) return OpenSslError("BN_one");
  if (BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(x)) == nullptr) {
    return OpenSslError("setting the serial number");
  }

  if (X509_gmtime_adj(X509_getm_notBefore(x), spec.not_before) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(x), spec.not_after) == nullptr) {
    return OpenSslError("setting the validity period");
  }

  X509_NAME* subject = X509_get_subject_name(x);
  if (X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(spec.common_name), -1, -1,
                                 0) != 1) {
    return OpenSslError("setting the subject name");
  }
  if (X509_set_issuer_name(x, X509_get_subject_name(issuer_cert)) != 1) {
    return OpenSslError("setting the issuer name");
  }
  if (X509_set_pubkey(x, key) != 1) return OpenSslError("X509_set_pubkey");

  X509V3_CTX ctx{};
  X509V3_set_ctx(&ctx, issuer_cert, x, nullptr, nullptr, 0);
  // The subject key identifier goes first: a self-signed certificate's
  // authority key identifier is read from it.
  SEGSTORE_RETURN_IF_ERROR(AddExtension(x, &ctx, NID_subject_key_identifier, "hash"));
  SEGSTORE_RETURN_IF_ERROR(AddExtension(x, &ctx, NID_authority_key_identifier, "keyid:always"));
  switch (spec.kind) {
    case CertKind::kCa:
      SEGSTORE_RETURN_IF_ERROR(AddExtension(x, &ctx, NID_basic_constraints, "critical,CA:TRUE"));
      SEGSTORE_RETURN_IF_ERROR(
          AddExtension(x, &ctx, NID_key_usage, "critical,keyCertSign,cRLSign"));
      break;
    case CertKind::kServer:
    case CertKind::kClient:
      SEGSTORE_RETURN_IF_ERROR(AddExtension(x, &ctx, NID_basic_constraints, "critical,CA:FALSE"));
      SEGSTORE_RETURN_IF_ERROR(AddExtension(x, &ctx, NID_key_usage, "critical,digitalSignature"));
      break;
  }
  if (spec.kind == CertKind::kServer) {
    SEGSTORE_RETURN_IF_ERROR(AddExtension(x, &ctx, NID_ext_key_usage, "serverAuth"));
    SEGSTORE_RETURN_IF_ERROR(
        AddExtension(x, &ctx, NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1,IP:::1"));
  } else if (spec.kind == CertKind::kClient) {
    SEGSTORE_RETURN_IF_ERROR(AddExtension(x, &ctx, NID_ext_key_usage, "clientAuth"));
  }

  if (X509_sign(x, issuer_key, EVP_sha256()) <= 0) {
    return OpenSslError(std::string("signing ") + spec.common_name);
  }
  return cert;
}

// A CA's (or leaf's) key and certificate, kept in memory while leaves are signed.
struct Issued {
  PkeyPtr key;
  X509Ptr cert;
};

// Generates a key, certifies it as `spec` says (self-signed when `issuer` is
// null), and writes the certificate to `cert_path` and, if `key_path` is not
// null, the key to `key_path`.
Result<Issued> Issue(const CertSpec& spec, const Issued* issuer, const std::string& cert_path,
                     const std::string* key_path) {
  Result<PkeyPtr> key = GenerateKey();
  if (!key.ok()) return key.status();
  Result<X509Ptr> cert =
      MakeCert(spec, key->get(), issuer != nullptr ? issuer->cert.get() : nullptr,
               issuer != nullptr ? issuer->key.get() : nullptr);
  if (!cert.ok()) return cert.status();
  SEGSTORE_RETURN_IF_ERROR(WriteCert(cert_path, cert->get()));
  if (key_path != nullptr) SEGSTORE_RETURN_IF_ERROR(WriteKey(*key_path, key->get()));
  return Issued{std::move(key).value(), std::move(cert).value()};
}

}  // namespace

Result<TestPki> MakeTestPki(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IOError(dir + ": creating the directory: " + ec.message());
  ERR_clear_error();  // so that error messages name only our own failures

  const std::filesystem::path base(dir);
  auto in_dir = [&base](const char* name) { return (base / name).string(); };
  TestPki pki;
  pki.dir = dir;
  pki.ca_cert = in_dir("ca.pem");
  pki.server_cert = in_dir("server.pem");
  pki.server_key = in_dir("server.key");
  pki.client_cert = in_dir("client.pem");
  pki.client_key = in_dir("client.key");
  pki.other_ca_cert = in_dir("other_ca.pem");
  pki.other_server_cert = in_dir("other_server.pem");
  pki.other_server_key = in_dir("other_server.key");
  pki.other_client_cert = in_dir("other_client.pem");
  pki.other_client_key = in_dir("other_client.key");
  pki.expired_server_cert = in_dir("expired_server.pem");
  pki.expired_server_key = in_dir("expired_server.key");

  constexpr const char* kServerName = "localhost";
  constexpr const char* kClientName = "segstore-test-client";
  const CertSpec server{CertKind::kServer, kServerName};
  const CertSpec client{CertKind::kClient, kClientName};
  const CertSpec expired{CertKind::kServer, kServerName, -2 * kDay, -kDay};

  for (bool other : {false, true}) {
    const CertSpec ca{CertKind::kCa, other ? "segstore other test CA" : "segstore test CA"};
    Result<Issued> issuer = Issue(ca, nullptr, other ? pki.other_ca_cert : pki.ca_cert, nullptr);
    if (!issuer.ok()) return issuer.status();
    const Issued* by = &issuer.value();
    Result<Issued> leaf = Issue(server, by, other ? pki.other_server_cert : pki.server_cert,
                                other ? &pki.other_server_key : &pki.server_key);
    if (!leaf.ok()) return leaf.status();
    leaf = Issue(client, by, other ? pki.other_client_cert : pki.client_cert,
                 other ? &pki.other_client_key : &pki.client_key);
    if (!leaf.ok()) return leaf.status();
    if (!other) {
      leaf = Issue(expired, by, pki.expired_server_cert, &pki.expired_server_key);
      if (!leaf.ok()) return leaf.status();
    }
  }
  return pki;
}

}  // namespace segstore::testing
