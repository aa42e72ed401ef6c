"""What a document may hold before it is read: the zip-based formats' uncompressed size (a zip bomb is a few
kilobytes that inflate to gigabytes in the library that reads it)."""
from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass

from nmt_toolkit.config import option
from nmt_toolkit.errors import DataError


@dataclass
class DocumentConfig:
    """Limits on the documents nmt-translate-file and nmt-serve's /translate_file read."""

    max_unzipped_bytes: int = option(200_000_000, "largest uncompressed size of a .docx, .odt, .odp or .pptx "
                                                  "(the sum of its zip archive's members; a larger one is refused "
                                                  "before it is read)", low=1, high=100_000_000_000)
    max_zip_members: int = option(10_000, "most files inside a .docx, .odt, .odp or .pptx", low=1,
                                  high=10_000_000)


def check_archive(data: bytes, what: str, limits: DocumentConfig) -> None:
    """``data`` is a zip archive within ``limits`` (its members' declared sizes; the zip reader never
    inflates a member past the size it declares), else one DataError naming ``what``."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        raise DataError(f"{what}: not a readable zip archive, which the format is ({exc})") from None
    if len(members) > limits.max_zip_members:
        raise DataError(f"{what}: {len(members)} files in the archive, over the limit of {limits.max_zip_members} "
                        f"(--max-zip-members)")
    size = sum(m.file_size for m in members)
    if size > limits.max_unzipped_bytes:
        raise DataError(f"{what}: {size} bytes uncompressed, over the limit of {limits.max_unzipped_bytes} "
                        f"(--max-unzipped-bytes)")
