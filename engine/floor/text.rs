//! Text files: read as UTF-8, or an error naming the file and the first byte that is not.

use std::io;
use std::path::Path;

/// The contents of `path` as text; a file that is not UTF-8 is an `InvalidData` error saying
/// so, with the path and the offset of the first byte that is not.
pub(crate) fn read_utf8(path: &Path) -> io::Result<String> {
    let bytes = std::fs::read(path)?;
    String::from_utf8(bytes).map_err(|error| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            not_utf8(path, error.utf8_error()),
        )
    })
}

/// "`path` is not UTF-8 at byte N" (the offset counted from 0).
pub(crate) fn not_utf8(path: &Path, error: std::str::Utf8Error) -> String {
    format!(
        "`{}` is not UTF-8 at byte {} (a binary file, or text in another encoding)",
        path.display(),
        error.valid_up_to()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_utf8_is_named_with_its_first_bad_byte() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.bin");
        std::fs::write(&path, b"ok\xc3\xa9 \xff\x00").unwrap();
        let error = read_utf8(&path).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        let text = error.to_string();
        assert!(text.contains("b.bin` is not UTF-8 at byte 5"), "{text}");
        std::fs::write(&path, "é fine").unwrap();
        assert_eq!(read_utf8(&path).unwrap(), "é fine");
    }
}
