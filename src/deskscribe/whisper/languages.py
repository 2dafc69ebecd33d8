"""Whisper's languages: code -> English name (the order of its language tokens)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

LANGUAGES = {
    "en": "English", "zh": "Chinese", "de": "German", "es": "Spanish", "ru": "Russian",
    "ko": "Korean", "fr": "French", "ja": "Japanese", "pt": "Portuguese", "tr": "Turkish",
    "pl": "Polish", "ca": "Catalan", "nl": "Dutch", "ar": "Arabic", "sv": "Swedish",
    "it": "Italian", "id": "Indonesian", "hi": "Hindi", "fi": "Finnish", "vi": "Vietnamese",
    "he": "Hebrew", "uk": "Ukrainian", "el": "Greek", "ms": "Malay", "cs": "Czech",
    "ro": "Romanian", "da": "Danish", "hu": "Hungarian", "ta": "Tamil", "no": "Norwegian",
    "th": "Thai", "ur": "Urdu", "hr": "Croatian", "bg": "Bulgarian", "lt": "Lithuanian",
    "la": "Latin", "mi": "Maori", "ml": "Malayalam", "cy": "Welsh", "sk": "Slovak",
    "te": "Telugu", "fa": "Persian", "lv": "Latvian", "bn": "Bengali", "sr": "Serbian",
    "az": "Azerbaijani", "sl": "Slovenian", "kn": "Kannada", "et": "Estonian", "mk": "Macedonian",
    "br": "Breton", "eu": "Basque", "is": "Icelandic", "hy": "Armenian", "ne": "Nepali",
    "mn": "Mongolian", "bs": "Bosnian", "kk": "Kazakh", "sq": "Albanian", "sw": "Swahili",
    "gl": "Galician", "mr": "Marathi", "pa": "Punjabi", "si": "Sinhala", "km": "Khmer",
    "sn": "Shona", "yo": "Yoruba", "so": "Somali", "af": "Afrikaans", "oc": "Occitan",
    "ka": "Georgian", "be": "Belarusian", "tg": "Tajik", "sd": "Sindhi", "gu": "Gujarati",
    "am": "Amharic", "yi": "Yiddish", "lo": "Lao", "uz": "Uzbek", "fo": "Faroese",
    "ht": "Haitian Creole", "ps": "Pashto", "tk": "Turkmen", "nn": "Nynorsk", "mt": "Maltese",
    "sa": "Sanskrit", "lb": "Luxembourgish", "my": "Myanmar", "bo": "Tibetan", "tl": "Tagalog",
    "mg": "Malagasy", "as": "Assamese", "tt": "Tatar", "haw": "Hawaiian", "ln": "Lingala",
    "ha": "Hausa", "ba": "Bashkir", "jw": "Javanese", "su": "Sundanese", "yue": "Cantonese",
}  # fmt: skip


def language_name(code: str | None) -> str:
    """ "English" for "en"; "Detect automatically" for None; the code itself when unknown."""
    if not code:
        return "Detect automatically"
    return LANGUAGES.get(code, code)


# --------------------------------------------------------------------------- per-part detection

# Below this probability a part's detected language defers to a sure neighbour's: a short
# reply ("Ja.", "OK") says little about its language, the speech around it says more.
UNSURE = 0.5


def parse_languages(text: str | None, valid: Iterable[str] = LANGUAGES) -> tuple[str, ...]:
    """ "en, de" -> ("en", "de"); an unknown code is a ValueError that names the valid ones."""
    if not text:
        return ()
    codes = tuple(dict.fromkeys(c.strip().lower() for c in text.split(",") if c.strip()))
    known = set(valid)
    unknown = [c for c in codes if c not in known]
    if unknown:
        raise ValueError(
            f"unknown language code{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
            f"use codes from: {', '.join(sorted(known))}"
        )
    return codes


@dataclass
class Detected:
    """The language chosen for one part (window, chunk, utterance) and how sure it was."""

    language: str
    probability: float
    probs: dict[str, float]


def choose(probs: dict[str, float], allowed: Sequence[str] | None = None) -> Detected:
    """The most probable language, among ``allowed`` when given (renormalised over them)."""
    if allowed:
        picked = {c: probs.get(c, 0.0) for c in allowed}
        total = sum(picked.values()) or 1.0
        probs_in = {c: p / total for c, p in picked.items()}
    else:
        probs_in = probs
    best = max(probs_in, key=lambda c: probs_in[c])
    return Detected(best, probs_in[best], probs_in)


def settle(parts: list[Detected], before: str | None = None) -> list[str]:
    """Each part's language. An unsure part takes the language of a sure neighbour (the part
    before it, or ``before`` for the first, and the next sure part after it) when that
    language is at least a quarter as probable there as the part's own best guess; of two
    such neighbours, the one more probable there."""
    sure = [d.language if d.probability >= UNSURE else None for d in parts]
    out: list[str] = []
    for i, d in enumerate(parts):
        if sure[i] is not None:
            out.append(sure[i])
            continue
        prev = out[-1] if out else before
        after = next((s for s in sure[i + 1 :] if s is not None), None)
        plausible = [c for c in (prev, after) if c and d.probs.get(c, 0.0) >= d.probability / 4]
        plausible.sort(key=lambda c: -d.probs.get(c, 0.0))
        out.append(plausible[0] if plausible else d.language)
    return out


def add_spoken(totals: dict[str, float], language: str | None, seconds: float) -> None:
    """Count ``seconds`` of speech in ``language`` into running ``totals``."""
    if language:
        totals[language] = totals.get(language, 0.0) + max(seconds, 0.0)


def main_language(parts: Iterable[tuple[str | None, float]]) -> str | None:
    """The language spoken longest, from (language, seconds) pairs."""
    totals: dict[str, float] = {}
    for code, seconds in parts:
        if code:
            totals[code] = totals.get(code, 0.0) + max(seconds, 0.0)
    return max(totals, key=lambda c: totals[c]) if totals else None


def language_problem(tk, language: str | None) -> str | None:
    """Why the model of tokenizer ``tk`` cannot be asked for ``language`` (None: it can, or
    none is asked for). The one check, for files and for realtime sessions."""
    if not language:
        return None
    if not tk.multilingual and language != "en":
        return (f"this model is English-only; it cannot transcribe {language!r}. Pick a "
                "multilingual model, or leave the language out")  # fmt: skip
    if tk.multilingual and language not in tk.language_ids:
        return (f"unknown language {language!r}; use a code such as "
                f"{', '.join(sorted(tk.language_ids)[:12])}, …")  # fmt: skip
    return None
