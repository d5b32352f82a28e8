// Package files moves files between paired devices: the receive folder and
// its naming rules, the manifest a transfer is announced with, the receiving
// http.Handler (streamed, hashed as bytes arrive, resumable) and the sending
// client.
//
// The package knows no A2A; package app wires it (ARCHITECTURE.md,
// "files"): the receiver turns one A2A message carrying FileParts into one
// task; once the owner approves it, the task calls Receiver.Begin with the
// task ID as the transfer ID and the sender's device ID, the app mounts
// Receiver.Handler behind pairing's grant middleware on the pinned HTTPS
// listener, and the task ends with Transfer.Wait's Result as its artifact.
//
// # The announcement: one A2A message, one FilePart per file
//
// A transfer is announced by message/send (or message/stream) on the
// receiver's A2A endpoint, with the sender's grant token. The message has
// one FilePart per manifest Entry, in manifest order (a part's position
// among the message's FileParts is the file's index on the wire), and may
// have TextParts (a note the owner reads); a message with a DataPart is not
// a transfer. An announcement carries no bytes, yet both protocol versions
// require a file part to carry content (0.3: exactly one of file.bytes and
// file.uri; 1.0: one of raw, url, text, data). Its content is therefore the
// file's name by hash, an RFC 6920 "ni" URI, which identifies the bytes
// without saying where they are ("ni:///sha-256;" + unpadded base64url of
// the 32-byte digest; NamedInfoURI). The receiver never dereferences it. The
// rest of the Entry sits in the part's metadata under the namespaced key
// PartMetadataKey:
//
//	A2A 0.3 (FilePart, §6.5.2, FileWithUri §6.6.3):
//	{"kind": "file",
//	 "file": {"name": "IMG_1.jpg", "mimeType": "image/jpeg",
//	          "uri": "ni:///sha-256;LCa0a2j_xo_5m0U8HTBBNBNCLXBkg7-g-YpeiGJm564"},
//	 "metadata": {"meshtray.file": {"path": "Trip/IMG_1.jpg", "size": 2481233,
//	              "sha256": "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"}}}
//
//	A2A 1.0 (Part with url, filename, mediaType):
//	{"url": "ni:///sha-256;LCa0a2j_xo_5m0U8HTBBNBNCLXBkg7-g-YpeiGJm564",
//	 "filename": "IMG_1.jpg", "mediaType": "image/jpeg",
//	 "metadata": {"meshtray.file": {"path": "Trip/IMG_1.jpg", "size": 2481233,
//	              "sha256": "2c26b46b…"}}}
//
// name/filename is Entry.Name, mimeType/mediaType Entry.MediaType
// ("application/octet-stream" when unknown); the metadata object is
// {path, size, sha256} of the Entry (PartMetadata). The "ni" URI and the
// metadata's sha256 must name the same digest. a2a-go v2's a2av0
// conversion maps one form to the other unchanged, so the receiver reads
// both as one.
//
// The receiver answers with a task (submitted, "waiting for approval on
// <device>" while the owner decides). Once approved it calls Begin and
// reports the task working with a status message ("receiving N files…");
// from then on the sender PUTs the bytes under Prefix + taskID + "/" +
// index on the same origin as the A2A endpoint, with the same token. The
// task ends completed with one artifact named "files" holding a DataPart
// that is the Result JSON ({"files": [{path, size, media_type, sha256}]},
// paths relative to the receive folder; the folder's own path is never
// said to a sender), or failed, rejected or canceled with the reason as
// its status message. The receiver holds the transfer's free space from
// admission (Receiver.Reserve, before the owner decides) until it ends. Cancelling the task aborts the transfer and removes its partial
// files; a PUT cut off resumes (HEAD, then Content-Range) as long as the
// task lives.
//
// Inline files: an agent that is not a meshtray device may send FileParts
// with bytes (0.3 file.bytes, 1.0 raw), with or without the metadata; they
// are approved the same way and saved through the same checks (the bytes
// count as one PUT each), bounded by the A2A request body limit. A FilePart
// whose uri (url) is anything but the "ni" name of an announcement is
// refused: meshtray never fetches a URI a caller names.
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
