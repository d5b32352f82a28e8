// Package files moves files between paired devices: the receive folder and
// its naming rules, the manifest a transfer is announced with, the receiving
// http.Handler (streamed, hashed as bytes arrive, resumable) and the sending
// client.
//
// It is self-contained and not wired into the node yet. The intended wiring
// (ARCHITECTURE.md, "files"): the receiver turns one A2A message carrying
// FileParts into one task; once the owner approves it, the task calls
// Receiver.Begin with the task ID as the transfer ID and the sender's device
// ID, the app mounts Receiver.Handler behind pairing's grant middleware on
// the pinned HTTPS listener, and the task ends with Transfer.Wait's Result as
// its artifact.
//
// Wire protocol (all under the handler's prefix, default /files/):
//
//	GET  /files/{transfer}          -> 200 JSON Status of every file
//	HEAD /files/{transfer}/{index}  -> 200, Upload-Offset: bytes safely on disk,
//	                                   Upload-Length: the announced size
//	PUT  /files/{transfer}/{index}  <- bytes; Content-Range: bytes START-END/SIZE
//	                                   (RFC 9110 §14.4, partial PUT §14.5);
//	                                   without it the body is the whole file
//	   -> 204 + Upload-Offset (more to come), 201 + JSON Saved (verified, named),
//	      409 + Upload-Offset (START is not the offset, or another PUT of the
//	      file is running), 413 (more bytes than announced), 422 (size or
//	      SHA-256 do not match: the file and its transfer fail), 507 (disk full),
//	      410 (the transfer failed or was cancelled), 429 (too many uploads).
//
// Upload-Offset is the header name of the IETF draft "Resumable Uploads for
// HTTP" (draft-ietf-httpbis-resumable-upload).
package files
