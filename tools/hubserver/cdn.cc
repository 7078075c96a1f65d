// SPDX-License-Identifier: Apache-2.0
// The CDN route of the test server: signed URLs (/cdn/{sha256}?expires=MS&sig=HEX), the
// blob's ETag (sha256, Xet-like, changed), transient CDN faults, then the bytes.
#include <cstdlib>

#include "server_internal.h"

namespace tensorfetch::testing {

using detail::Route;
using detail::Switches;

namespace {

std::string query_param(const httplib::Request& req, const char* key) {
  return req.has_param(key) ? req.get_param_value(key) : std::string();
}

}  // namespace

void HubServer::Impl::handle_cdn(const httplib::Request& req, httplib::Response& res,
                                 const PendingPtr& p, const Route& r) {
  if (!host_ok(req, res, p, true)) return;
  // Errors as S3 / CloudFront write them.
  auto cdn_error = [&](int status, const std::string& code, const std::string& msg) {
    res.status = status;
    set_body(res, p,
             "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>" + code +
                 "</Code><Message>" + msg + "</Message></Error>",
             "application/xml");
  };
  std::string expires = query_param(req, "expires");
  if (!repos.signature_ok(r.blob, expires, query_param(req, "sig"))) {
    p->rec.fault = "bad_signature";
    cdn_error(403, "AccessDenied", "Invalid signature");
    return;
  }
  if (detail::epoch_ms() > std::strtoll(expires.c_str(), nullptr, 10)) {
    p->rec.fault = "expired";
    cdn_error(403, "AccessDenied", "Request has expired");
    return;
  }
  auto blob = repos.blob(r.blob);
  if (!blob) {
    cdn_error(404, "NoSuchKey", "The specified key does not exist.");
    return;
  }
  p->rec.repo = blob->repo;
  p->rec.file = blob->file;
  const std::string blob_file = blob->repo + "/" + blob->file;
  std::string etag = "\"" + r.blob + "\"";
  int fault_status = 0;
  bool changed = switches.with([&](Switches& sw) {
    ++sw.cdn_count;
    if (sw.cdn_fault.when.take(req.target, blob_file)) fault_status = sw.cdn_fault.status;
    if (sw.etag_change_after >= 0 && sw.cdn_count > sw.etag_change_after) {
      etag = changed_etag(r.blob);
      p->rec.fault = "etag_changed";
      return true;
    }
    if (sw.cdn_etag.when.take(req.target, blob_file)) {
      etag = "\"" + sw.cdn_etag.value + "\"";
      p->rec.fault = "cdn_etag";
    } else if (sw.xet_etags) {
      etag = xet_etag(r.blob);
    }
    return false;
  });
  if (fault_status != 0) {  // a transient fault of a valid request
    p->rec.fault = "cdn_fault";
    std::error_code ec;
    const auto size = std::filesystem::file_size(blob->path, ec);
    if (fault_status == 416) {
      res.set_header("Content-Range", "bytes */" + std::to_string(size));
      cdn_error(416, "InvalidRange", "The requested range is not satisfiable");
    } else if (fault_status == 403) {
      cdn_error(403, "SignatureError", "SignatureError: the request signature is not valid");
    } else {
      cdn_error(400, "InvalidArgument", "Bad Request");
    }
    return;
  }
  serve_file(req, res, p, blob->path, etag, changed, "binary/octet-stream", blob_file);
}

}  // namespace tensorfetch::testing
