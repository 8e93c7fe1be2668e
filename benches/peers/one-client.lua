-- wrk script of the deny-one mode: every request names client 0.
wrk.headers["x-client"] = "0"
