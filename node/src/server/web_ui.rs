//! The reference's Web UI at `/ui` (`http.web_ui = true`): the static build of its SvelteKit app,
//! which `ci/web-ui.sh` makes from the reference's source (`web/`, `npm run build:static`) and
//! places in `http.web_ui_path`, served from that directory. The app talks to the HTTP API of the
//! same origin. A path with an extension is a file of the build; one without is a route of the
//! app, answered with its `index.html` (its client-side router takes it from there). Without a
//! build in the directory, `/ui` answers 404 with how to make one.
//!
//! Files are read with glommio (no blocking read on the shard), at most `FILE_BYTES_MAX` each;
//! a path that would leave the directory (`..`, a hidden name) is refused.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Response, StatusCode};

/// The largest file the UI serves (its scripts are a few hundred KiB).
pub const FILE_BYTES_MAX: u64 = 32 << 20;

/// What `/ui` says when there is no build to serve.
fn missing(root: &Path) -> Response<Full<Bytes>> {
    let body = format!(
        "The Web UI is not built: {} holds no index.html.\n\
         Build it from the reference's source (apache/iggy at server-0.9.0-edge.5) with\n\
         \n    ci/web-ui.sh IGGY_SOURCE\n\n\
         which runs `npm ci` and `npm run build:static` in its web/ directory and copies\n\
         web/build/static here; or point http.web_ui_path at such a build.\n",
        root.display()
    );
    plain(StatusCode::NOT_FOUND, "text/plain; charset=utf-8", Bytes::from(body))
}

fn plain(status: StatusCode, content_type: &str, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_str(content_type)
            .unwrap_or(hyper::header::HeaderValue::from_static("application/octet-stream")),
    );
    response
}

/// The file under `root` that the UI path `rest` (what follows `/ui/`) names, if it is a safe one.
fn file_of(root: &Path, rest: &str) -> Option<PathBuf> {
    let mut path = root.to_path_buf();
    for segment in rest.split('/').filter(|segment| !segment.is_empty()) {
        if segment.starts_with('.') || segment.contains('\\') || segment.contains('\0') {
            return None;
        }
        path.push(segment);
    }
    Some(path)
}

async fn read(path: &Path) -> Option<Bytes> {
    let file = glommio::io::BufferedFile::open(path).await.ok()?;
    let size = file.file_size().await.ok()?;
    if size > FILE_BYTES_MAX {
        let _ = file.close().await;
        return None;
    }
    let bytes = file.read_at(0, size as usize).await.ok().map(|read| Bytes::copy_from_slice(&read));
    let _ = file.close().await;
    bytes
}

/// The answer to `GET /ui` or `GET /ui/{rest}`: the file `rest` names, else (for a path with no
/// extension, a route of the app) `index.html`, as the reference serves its embedded build.
pub async fn respond(root: &Path, rest: &str) -> Response<Full<Bytes>> {
    let index = root.join("index.html");
    let Some(path) = file_of(root, rest) else {
        return plain(StatusCode::NOT_FOUND, "text/plain", Bytes::from_static(b"Not Found"));
    };
    let is_route = !rest.rsplit('/').next().is_some_and(|last| last.contains('.'));
    let mut found = if rest.is_empty() { None } else { read(&path).await.map(|bytes| (path, bytes)) };
    if found.is_none() && is_route {
        found = read(&index).await.map(|bytes| (index.clone(), bytes));
    }
    match found {
        Some((served, bytes)) => {
            let mime = mime_guess::from_path(&served).first_or_octet_stream();
            plain(StatusCode::OK, mime.as_ref(), bytes)
        }
        None if read(&index).await.is_none() => missing(root),
        None => plain(StatusCode::NOT_FOUND, "text/plain", Bytes::from_static(b"Not Found")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_build() {
        let root = Path::new("/srv/ui");
        assert_eq!(file_of(root, "_app/immutable/start.js"), Some(PathBuf::from("/srv/ui/_app/immutable/start.js")));
        assert_eq!(file_of(root, "../etc/passwd"), None);
        assert_eq!(file_of(root, "a/../../b"), None);
        assert_eq!(file_of(root, ".env"), None);
        assert_eq!(file_of(root, ""), Some(PathBuf::from("/srv/ui")));
    }
}
